// Package client is Gantry's Go client, generated from openapi.yaml: a
// ClientWithResponses whose methods are the operations. Their bodies,
// parameters and answers are the types of package api/model (import it
// beside this one; this package does not re-export them).
// The gantry CLI talks to servers through it; other Go programs may too.
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
