module github.com/pgoutbox/pgoutbox/adapters/watermill

go 1.26.0

require (
	github.com/ThreeDotsLabs/watermill v1.4.7
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/pgoutbox/pgoutbox v0.1.0
	github.com/stretchr/testify v1.12.1
)
