package propagate

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/reconfhq/reconf/internal/redact"
)

// ReasonEndpointsMixedSchemes is the stable reason of an
// EndpointSchemesError.
const ReasonEndpointsMixedSchemes = "cluster_endpoints_mixed_schemes"

// EndpointSchemesError is a list of etcd endpoints that mixes plain
// (http://, unix://) and TLS (https://, unixs://) schemes. etcd's client
// takes the first endpoint's for every member, so the members of the
// other scheme could never be reached: a fleet would join through the
// first kind alone and lose the channel with them, or never join. Its
// message names the endpoints, without credentials, and the reason.
type EndpointSchemesError struct {
	// Endpoints are the endpoints as given, in order (the first decides
	// the client's scheme).
	Endpoints []string
}

// Error names the endpoints and what to change, with the stable reason
// in parentheses.
func (e *EndpointSchemesError) Error() string {
	named := make([]string, len(e.Endpoints))
	for i, ep := range e.Endpoints {
		named[i] = redact.URLs(ep)
	}
	return fmt.Sprintf("the etcd endpoints %s mix plain (http://) and TLS (https://) schemes: etcd's client speaks the first one's to every member; give every endpoint the same scheme (%s)",
		strings.Join(named, ","), ReasonEndpointsMixedSchemes)
}

// CheckEndpointSchemes returns an *EndpointSchemesError when endpoints mix
// plain and TLS schemes, and nil otherwise. An endpoint without a scheme
// (host:port) takes the client's TLS when it has one, as etcd's client
// does, and mixes with neither.
func CheckEndpointSchemes(endpoints []string) error {
	var plain, secure bool
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil {
			continue
		}
		switch strings.ToLower(u.Scheme) {
		case "http", "unix":
			plain = true
		case "https", "unixs":
			secure = true
		}
	}
	if plain && secure {
		return &EndpointSchemesError{Endpoints: endpoints}
	}
	return nil
}
