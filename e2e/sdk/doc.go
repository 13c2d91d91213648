// Package sdk runs the official OpenAI and Anthropic client libraries, Go
// and Node.js, against a real reconfd process: every endpoint the gateway
// serves, on its success, stream and error paths, through each library's
// own stream helpers and error types.
//
// It is a module of its own so that the library's go.mod carries no client
// SDK. The Node.js part lives in node/ with a package-lock.json; a Go test
// installs it with `npm ci` into a temporary directory and runs it with
// node's test runner. Where node is missing the Node.js test skips, unless
// CI is set, where it fails. SDK_MATRIX_RECONFD=PATH runs the matrix
// against that reconfd (a release, another checkout) instead of one built
// from this repository.
//
// Adding an endpoint is adding rows: each SDK has a table of endpoints
// (openaiEndpoints for openai-go), and the error matrix (401, 404, 400)
// runs over every row.
package sdk
