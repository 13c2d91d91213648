// Package reconf gives a long-running service transactional, versioned
// runtime configuration. A reload applies whole or not at all, every
// generation is immutable and numbered, in-flight work keeps the
// generation it started with, and secrets never leak.
//
// A service describes its configuration as a Go struct whose fields carry
// a class, and hands it to New with a Source:
//
//	type Config struct {
//		Server struct {
//			Address string `yaml:"address" default:"127.0.0.1:8080"`
//		} `yaml:"server" reconf:"restart"`
//		Backends []Backend `yaml:"backends" reconf:"live"`
//	}
//
//	var poolKey = reconf.Key[*Pool]("pool")
//
//	rt, err := reconf.New[Config](ctx, src, reconf.WithConsumer(poolKey, pools, "backends"))
//
// # Field classes
//
// Every field is exactly one of live (changes at run time), restart (read
// once at start) or derived (computed by Normalize, never set). A field
// inherits the class of its nearest tagged ancestor; a field with none is
// unclassified and treated as restart. reconftest.RequireClassified fails
// a test when any field of a type has no class. Lists of structs with a "name" field (or a field tagged
// `reconf:",key"`) are compared by that key, so a change shows as
// "backends[stub].timeout".
//
// A string field tagged `reconf:",file"` names a file whose content is
// part of the configuration (a system prompt, a CA bundle): its digest is
// compared like a value, so editing the file and reloading is a change of
// that field, and in a cluster every worker must hold the same content.
// The file is read once per attempt, and a consumer gets those same bytes
// from FileContent in Prepare, so the file cannot change between the diff
// and the consumer.
//
// A field tagged `reconf:",hostfile"` is a file field whose content is
// each host's own (a listener's certificate and key): its digest decides
// whether the field changed on this host exactly as for a file field, but
// it is not carried in cluster records, so a follower applying a version
// reads and judges its own file instead of refusing a content that
// differs from the publisher's. A type that must check the content of its
// files (a certificate that parses and matches its key) implements
// ContextValidator and reads them with FileContent.
//
// Every file read on behalf of a configuration (the source, ${file:}
// secrets, file fields) must be a regular file after symlinks and is read
// with a size bound checked while reading (WithMaxSourceBytes, 2 MiB by
// default) under the attempt's context: a FIFO, a device, a directory or a
// /proc or /sys file is refused at once, never waited on. A referenced file
// that is refused makes the attempt invalid with file_not_regular,
// file_oversize or file_unreadable; a missing file field is the consumer's
// decision (FileContent returns fs.ErrNotExist); a missing ${file:} secret
// is secret_unresolved.
//
// # Sources and precedence
//
// A candidate is compiled in one order: `default:"..."` tags, then the
// strict YAML decode over them (exactly one document, unknown fields and
// duplicate keys rejected, size bound), then `env:"NAME"` tags, then
// WithOverride functions, then secret resolution, Normalize,
// `validate:"..."` rules and the type's Validate method. So the precedence
// is defaults < file < environment < explicit options, and a default fills
// only a field that no layer set: `enabled: false`, `rate: 0` and an
// override that sets 0 are kept (and validated). `key: null` on a field that
// cannot be nil is a type mismatch, not "absent"; a pointer field may take a
// default for its target. Numbers convert exactly or not at all: a fraction,
// an exponent or a leading zero into an integer, an overflow, or a minus
// sign into an unsigned field is field_type_mismatch.
//
// # Tags
//
// A configuration type describes itself with struct tags:
//
//	yaml:"name"            the key (`yaml:",inline"` for an embedded struct)
//	reconf:"live"          the class: live, restart or derived; inherited
//	reconf:",key"          the field that names a list element (else "name")
//	reconf:",file"         a path whose file content is part of the configuration
//	reconf:",hostfile"     a file field whose content is each host's own
//	default:"30s"          the value when no layer sets the field
//	env:"NAME"             an environment variable that overrides the file
//	validate:"min=1,max=9" rules, comma-separated:
//
//	required      a string, secret, list, map or pointer is not empty (nil)
//	min=N, max=N  a number within N; a duration within a duration
//	              ("min=1s"); a string, list or map of at least or at most N
//	              characters or elements
//	oneof=a b c   a string or integer is one of the words
//
// A rule on a pointer applies to its target when set. A mistake in a tag,
// an unknown rule, or a rule on a kind it cannot apply to (min on a bool,
// required on a number) is an error from New and from CheckTags.
//
// JSONSchema writes the same tags as a JSON Schema for editors: closed
// objects, types, required fields, defaults, oneof and bounds; a `doc`
// tag, or WithDescriptions, describes a field.
//
// # Generations
//
// Current returns the active *Generation with one atomic load. Acquire pins
// it for a unit of work; Release ends the hold. A generation that is no
// longer active retires when its last pin goes: its OnRetire hooks and the
// runtime's retire hooks run, and consumer values attached to it (see
// Valuer) that no live generation shares are closed. The number of retained
// generations is bounded (WithRetention); a publish that would exceed it is
// retention-blocked, and pinned work is never cut short.
//
// # Consumers and pins
//
// A Consumer turns configuration into live state in two phases: Prepare
// builds it aside, Commit or Abort follows. The state a request needs
// belongs to the generation it pinned: a Prepared that is a Valuer
// attaches a value, registered under a Key[V] and read with
// key.Get(pin), typed. A Prepare that returns (nil, nil), or a value of
// nil, keeps the previous value: nothing to rebuild. Every path a consumer
// or WithProcessWide registers for must name a field of the type, or
// New fails with ErrUnknownPath naming the nearest fields.
//
// A pin travels with a request's context: ContextWithPin(ctx, pin) and
// PinFromContext[Config](ctx). The context does not own the pin; the code
// that acquired it releases it.
//
// # Mutation
//
// A published configuration is read-only. The runtime takes a digest of
// each generation when it is published and compares the active one's
// during every attempt (just before the swap when it publishes, standing
// for the retire check of a generation no pin holds past it; at the end
// otherwise) and each one's at retire; a difference is
// reported with its paths in the log, in Status and to
// WithMutationObserver functions (WithMutationCheck: log, the default;
// panic; off). The library reads no environment variable for this or
// anything else.
//
// # Transactions
//
// Reload runs one attempt: read, compile, diff, classify, check retention,
// prepare the consumers whose paths changed (in registration order), swap
// the active pointer, commit. A failure before the swap aborts prepared
// consumers in reverse order and leaves everything as it was. The attempt
// ends in exactly one Outcome with a stable Reason; outcomes are results,
// not errors. Check runs the same steps and aborts instead of publishing.
//
// # Concurrency
//
// One attempt runs at a time; a trigger that arrives during one gets Busy at
// once. Once accepted, an attempt belongs to the runtime, bounded by the
// attempt timeout and canceled by Close, not by the caller's context.
// A rollout's decisions (its driver's and the rollout controls') take
// the attempt slot too, so they never interleave with an attempt.
// Lock order: Runtime.closeLock, then the attempt slot, then Runtime.mu;
// Generation.hookMu is taken alone. No lock is held while calling a
// consumer, a hook or an observer.
//
// # Staged rollout
//
// Stage offers a change to a share of entities under a Strategy (a
// preset such as canary_10_percent_20_minutes, or one declared in the
// service's configuration) instead of publishing it to all:
//
//	canary, _ := reconf.Preset("canary_10_percent_20_minutes")
//	res, err := rt.Stage(ctx, reconf.TriggerAPI, canary)
//
//	pin := rt.AcquireFor(clientKey) // the candidate or the active generation, sticky
//	defer pin.Release()
//	rt.Recorder().Observe(pin.ID(), failed, latency)
//
// A driver owned by the runtime judges each step (WithHealth; by default
// the strategy's thresholds over the Recorder) and widens, extends,
// holds, promotes or rolls back; a rollback is a new generation with the
// previous content, and a reload does not re-apply the rolled-back
// content (rolled_back_content) unless through Reapply. The mark lasts as
// long as the process, or in a fleet as long as its channel's data
// (reconfd also keeps it in a state file, so that a restart starts on
// the previous content rather than the rolled-back file). Current and
// Acquire keep returning the active generation. docs/design/rollout.md
// has the whole design.
//
// # Clusters
//
// With a cluster channel (package propagate's, on etcd, given to New as
// ch.Option()) the runtime is one worker of a fleet. New joins at the
// cluster's current version; a Reload that would publish writes a record
// (the live fields, secrets as references, file digests) with
// compare-and-set on the version it holds, and loses with busy/superseded
// if another worker published first; the worker's follower
// (propagate.Follow) runs other workers' versions through the same staged
// path. A generation's ID is its cluster version on every worker.
//
// # Secrets
//
// A Secret prints as [REDACTED] in every rendering. In YAML it is a literal
// or a reference, ${env:NAME} or ${file:/abs/path}, resolved at compile
// time; Reveal returns the value. Errors name the field path and the kind
// of reference, never the value.
//
// # Packages
//
// What each package of the module owns, and below it (after ">") the
// packages of the module it may import: "reconf" is this package, a path
// ending in "/..." is that package and everything under it, "..." is any
// package, "-" is none. Imports from outside the module are not limited
// here. The root imports no leaf; a public leaf imports the root's public
// API and internal helpers; internal helpers import nothing of the module
// but other helpers; the service reaches the public leaves: cmd/reconfd
// (commands, flags, printing) and the internal packages it is made of
// (gateway, lifecycle, serve, adminclient, discovery, fleetstatus). The
// tests reach everything. TestLayering fails when a package is missing
// from this map, named here but gone, or imports outside its line.
//
//	reconf                    runtime, generations, pins, consumers, outcomes, diff, rollout
//	                          > internal/atomicdir internal/configdiff internal/fieldclass internal/fleet internal/millis internal/reasons internal/restartopt internal/safefile
//	source                    file sources: integrity, atomic replacement, locking
//	                          > reconf internal/atomicdir internal/safefile
//	admin                     the management HTTP API beside a runtime
//	                          > reconf internal/certfile internal/fleet internal/history internal/reasons internal/restartapi internal/safefile
//	metrics                   Prometheus metrics of a runtime
//	                          > reconf
//	trigger                   SIGHUP as a trigger of attempts
//	                          > reconf
//	reconftest                the conformance kit for consumers and configuration types
//	                          > reconf source internal/fieldclass
//	propagate                 the cluster channel on etcd: publish, follow, presence
//	                          > reconf internal/certfile internal/fleet internal/history internal/millis internal/reasons internal/redact propagate/internal/zlog
//	propagate/embedded        etcd inside the process, a host's shared channel
//	                          > internal/ownerdir propagate/internal/zlog
//	propagate/internal/zlog   etcd's zap logs into slog
//	                          > -
//	gate                      in-flight bounds per backend, for a process or a fleet
//	                          > -
//	handoff                   listening sockets passed to a successor process
//	                          > -
//	internal/atomicdir        revisions of Kubernetes atomic-writer directories
//	                          > -
//	internal/certfile         certificate files into TLS settings
//	                          > internal/safefile
//	internal/configdiff       two configurations compared path by path, outside the API
//	                          > -
//	internal/earlysignal      signals caught before serve's handlers
//	                          > -
//	internal/exitcode         the exit codes of reconfd's commands
//	                          > -
//	internal/fieldclass       a configuration type's paths with their classes, outside the API
//	                          > -
//	internal/fleet            a fleet's record, channel and rollback mark, and a runtime's side of it, outside the API
//	                          > -
//	internal/history          one process's attempts, bounded, as the management API shows them
//	                          > reconf internal/millis
//	internal/millis           durations as fractional milliseconds
//	                          > -
//	internal/ownerdir         owners of a private directory in a shared one
//	                          > internal/safefile
//	internal/reasons          the stable reasons only a cluster or a file check produces
//	                          > -
//	internal/redact           credentials out of URL-like text
//	                          > -
//	internal/restartapi       the restart endpoint's answers, outcomes and reasons, outside the API
//	                          > reconf
//	internal/restartopt       a replacing process's runtime options, outside the API
//	                          > -
//	internal/safefile         bounded reads of regular files only
//	                          > -
//	internal/sighold          SIGHUP held before the listener exists
//	                          > reconf trigger
//	internal/termtext         text safe for a terminal
//	                          > -
//	internal/testkit          helpers the tests share
//	                          > -
//	internal/testkit/keyload  one client key driven at a fleet, judged by window
//	                          > -
//	internal/testetcd         the etcd member tests run against, in the test's process
//	                          > propagate/embedded
//	internal/etcdproc         an embedded etcd member in a child process, for tests
//	                          > propagate/embedded
//	internal/gateway          the reconfd gateway: data plane, routing, limits
//	                          > reconf admin gate propagate/... source internal/...
//	internal/lifecycle        reconfd's processes: supervise, roll, restart, hand over
//	                          > reconf admin gate handoff propagate/... source trigger internal/...
//	internal/serve            the body of reconfd serve: one process, a worker, a supervisor
//	                          > reconf admin handoff metrics propagate internal/...
//	internal/adminclient      the management API client of reconfd's commands
//	                          > reconf admin internal/certfile internal/discovery internal/exitcode internal/restartapi internal/safefile
//	internal/discovery        the file by which reconfd's CLI finds a running serve
//	                          > admin internal/exitcode internal/safefile
//	internal/rollmark         a single reconfd's rollback mark, in its state file
//	                          > reconf internal/fleet internal/safefile
//	internal/fleetstatus      a status's fleet fields as lines and tables, wait's verdict
//	                          > reconf admin gate propagate internal/gateway internal/termtext
//	cmd/reconfd               the reconfd command: commands, flags, printing
//	                          > ...
//	e2e                       end-to-end tests of the reconfd binary
//	                          > ...
//	e2e/intruder              the e2e tests' hostile local user
//	                          > ...
package reconf
