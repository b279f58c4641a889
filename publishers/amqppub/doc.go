// Package amqppub publishes pgoutbox events to RabbitMQ (AMQP 0-9-1).
package amqppub
