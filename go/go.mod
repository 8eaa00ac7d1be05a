module github.com/runstore/runstore/go

go 1.26.0

// The generated code lives in this repository's gen/go module, unpublished:
// this directive resolves it from the checkout (docs/clients/go.md).
replace github.com/runstore/runstore/gen/go => ../gen/go

require (
	github.com/runstore/runstore/gen/go v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261123191846-1e707ab9fbc2
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
