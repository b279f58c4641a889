module github.com/pgoutbox/pgoutbox/publishers/amqppub

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/pgoutbox/pgoutbox v0.1.0
	github.com/rabbitmq/amqp091-go v1.17.0
	github.com/stretchr/testify v1.12.1
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
