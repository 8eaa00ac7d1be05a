module github.com/runstore/runstore/bench/goclient

go 1.26.0

// Until the modules are published, both resolve from this checkout
// (docs/clients/go.md).
replace (
	github.com/runstore/runstore/gen/go => ../../gen/go
	github.com/runstore/runstore/go => ../../go
)

require github.com/runstore/runstore/go v0.0.0-00010101000000-000000000000

require (
	github.com/runstore/runstore/gen/go v0.0.0-00010101000000-000000000000 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261123191846-1e707ab9fbc2 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
