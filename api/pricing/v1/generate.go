// Package pricingv1 holds the pricing.v1 protocol buffers and the gRPC code
// generated from them. Do not edit the .pb.go files; regenerate them with
// `go generate ./api/...` (needs protoc, protoc-gen-go and protoc-gen-go-grpc).
package pricingv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative pricing.proto
