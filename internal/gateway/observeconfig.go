package gateway

import (
	"github.com/reconfhq/reconf"
)

// ObservabilityConfig sets what the gateway emits beyond its Prometheus
// metrics: OpenTelemetry traces and a JSON access log. Both are off by
// default and live: a reload turns them on, off, or points them elsewhere
// with no restart.
type ObservabilityConfig struct {
	Tracing   TracingConfig   `yaml:"tracing"`
	AccessLog AccessLogConfig `yaml:"access_log"`
}

// TracingConfig sends one span per request (and one per upstream attempt)
// to an OTLP collector over gRPC.
type TracingConfig struct {
	// Enabled turns tracing on.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the collector's OTLP gRPC address as a URL:
	// http://host:4317 (plain) or https://host:4317 (TLS, the system's
	// roots). Required when Enabled.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of requests traced, from 0 (none: tracing
	// stays configured and costs nothing a request) to 1 (every one).
	SampleRatio float64 `yaml:"sample_ratio" default:"1" validate:"min=0,max=1"`
}

// AccessLogConfig writes one JSON object a request, after its last byte.
type AccessLogConfig struct {
	// Enabled turns the access log on.
	Enabled bool `yaml:"enabled"`
	// Destination is stderr or a file's path (appended to, created with
	// mode 0600; a relative path is relative to the configuration file's
	// directory). A reload that changes it, or turns the log back on,
	// opens the file again, which is how a rotated file is let go.
	Destination string `yaml:"destination" default:"stderr"`
}

// validate checks the tracing endpoint; it never quotes it, since a URL
// may carry credentials.
func (o *ObservabilityConfig) validate() []error {
	var errs []error
	if t := o.Tracing; t.Enabled || t.Endpoint != "" {
		if msg := checkOTLPEndpoint(t.Endpoint); msg != "" {
			errs = append(errs, reconf.FieldErrorf("observability.tracing.endpoint", "%s", msg))
		}
	}
	if o.AccessLog.Destination == "" {
		errs = append(errs, reconf.FieldErrorf("observability.access_log.destination", "must be stderr or a file path"))
	}
	return errs
}

// checkOTLPEndpoint says what is wrong with an OTLP gRPC endpoint, or "".
func checkOTLPEndpoint(ep string) string {
	if ep == "" {
		return "is required when tracing is enabled, e.g. http://127.0.0.1:4317"
	}
	return checkServiceURL(ep, "must be an http or https URL of an OTLP gRPC collector, e.g. http://127.0.0.1:4317")
}
