// Package model holds the API's wire types — every schema, the operations'
// parameters and request bodies — generated once from openapi.yaml for both
// sides: the server's handlers (api/gen) and the Go client (api/client)
// import them, so a contract change breaks both builds at once.
package model

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
