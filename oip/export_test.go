package oip

// The gRPC endpoint's tensor conversions, for clients in tests.
var (
	TypedContents = typedContents
	TypedData     = typedData
)
