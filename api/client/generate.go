// Package client is Gantry's Go client, generated from openapi.yaml: a
// ClientWithResponses whose methods are the operations, over the models of
// api/model.
// The gantry CLI talks to servers through it; other Go programs may too.
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
