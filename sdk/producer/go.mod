module github.com/heraldhq/herald/sdk/producer

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	go.opentelemetry.io/otel/trace v1.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
