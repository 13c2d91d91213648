package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/internal/gateway"
)

// configDocs (schema_docs.go) holds the Go comments of the configuration's
// types and fields, so that the binary describes its schema without its
// sources; TestSchemaFiles keeps it, and docs/reconfd.schema.json, in step
// with the comments.
//go:generate go test -run ^TestSchemaFiles$ -update .

// configSchema returns the JSON Schema of reconfd's configuration file.
func configSchema() ([]byte, error) {
	return reconf.JSONSchema[gateway.Config](reconf.WithDescriptions(configDocs))
}

func newSchemaCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the configuration file",
		Long: `schema prints the JSON Schema (draft 2020-12) of reconfd's configuration
file, for editors and pipelines. It is generated from the same schema the
loader decodes with: unknown fields, types, enums, bounds, defaults and
secret references. Rules that span fields (a route naming a backend, a
kind's own fields) are checked by check-config alone.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b, err := configSchema()
			if err != nil {
				return err
			}
			_, err = stdout.Write(b)
			return err
		},
	}
}
