package amqppub

// BuildPublishing is buildPublishing, AMQPProblem amqpProblem, for the
// fuzz targets.
var (
	BuildPublishing = buildPublishing
	AMQPProblem     = amqpProblem
)
