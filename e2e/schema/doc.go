// Package schema checks that reconfd's JSON Schema and its loader agree:
// every example configuration and every invalid fixture gets the same
// verdict from the schema, through a real validator, as from the decoder,
// wherever JSON Schema can say the rule. It is its own module so that the
// library's go.mod does not carry a JSON Schema validator.
package schema
