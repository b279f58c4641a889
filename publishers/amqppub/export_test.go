package amqppub

import amqp "github.com/rabbitmq/amqp091-go"

// BuildPublishing is buildPublishing, AMQPProblem amqpProblem, for the
// fuzz targets.
var (
	BuildPublishing = buildPublishing
	AMQPProblem     = amqpProblem
)

// ClassifyClose is the error a message bound for r reports when the
// broker closed its channel with e and named it, for the tests of reason
// texts a test broker cannot produce.
func ClassifyClose(r Route, e *amqp.Error) error { return classify(r, closeCause(e)) }
