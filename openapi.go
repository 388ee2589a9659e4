// Package gantry holds what must live at the repository root: the OpenAPI
// document (openapi.yaml), embedded so the server can validate requests against
// it and serve it.
package gantry

import _ "embed"

// OpenAPI is the REST contract, openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
