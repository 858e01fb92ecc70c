// Package openapi embeds the OpenAPI 3.1 document of the vendor API as
// built, so that the gateway serves exactly the file kept in the repository
// and the end-to-end tests validate real answers against it.
package openapi

import _ "embed"

// Document is the OpenAPI 3.1 document in YAML.
//
//go:embed openapi.yaml
var Document []byte
