// Package client is Gantry's Go client, generated from openapi.yaml: the
// API's models and a ClientWithResponses whose methods are the operations.
// The gantry CLI talks to servers through it; other Go programs may too.
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
