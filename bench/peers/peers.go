// Package peers compares the read path of reconf with the configuration
// libraries Go services commonly use instead: spf13/viper and knadh/koanf.
// The comparison lives in its own module so the main go.mod stays lean.
package peers

// Document is the configuration every library under test loads.
const Document = `
server:
  address: 127.0.0.1:8080
routing:
  default_route: stub
  max_attempts: 2
backends:
  - name: stub
    timeout: 30s
`

// Config is reconf's typed view of Document.
type Config struct {
	Server struct {
		Address string `yaml:"address"`
	} `yaml:"server" reconf:"restart"`
	Routing struct {
		DefaultRoute string `yaml:"default_route"`
		MaxAttempts  int    `yaml:"max_attempts"`
	} `yaml:"routing" reconf:"live"`
	Backends []struct {
		Name    string `yaml:"name"`
		Timeout string `yaml:"timeout"`
	} `yaml:"backends" reconf:"live"`
}
