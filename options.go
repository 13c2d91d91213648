package reconf

import (
	"log/slog"
	"time"
)

// Defaults of the runtime's options.
const (
	DefaultRetention      = 8
	DefaultAttemptTimeout = time.Minute
)

// Option configures a Runtime.
type Option[T any] func(*options[T])

type options[T any] struct {
	logger            *slog.Logger
	retention         int
	attemptTimeout    time.Duration
	maxBytes          int64
	lookupEnv         func(string) (string, bool)
	overrides         []func(*T)
	consumers         []consumerReg[T]
	observers         []func(Result)
	retireHooks       []func(*Generation[T])
	resources         []resource
	mutationMode      MutationMode
	mutationObservers []func(Mutation)
	now               func() time.Time
	channel           Channel
	baseDir           string
	firstGen          uint64
}

// WithFirstGeneration numbers the startup load id instead of 1, so that a
// process that replaces another (a restart) continues its predecessor's
// numbering: pass the predecessor's active generation plus one. Zero means
// 1. A runtime with a Channel takes the cluster's version instead.
func WithFirstGeneration[T any](id uint64) Option[T] {
	return func(o *options[T]) { o.firstGen = id }
}

// WithLogger sets where the runtime writes its one record per attempt.
// The default is slog.Default().
func WithLogger[T any](l *slog.Logger) Option[T] { return func(o *options[T]) { o.logger = l } }

// WithRetention sets the retained-generation budget: the active generation
// plus old ones still pinned. A publish that would exceed it is
// retention-blocked. Values below 2 are raised to 2.
func WithRetention[T any](n int) Option[T] {
	return func(o *options[T]) { o.retention = max(n, 2) }
}

// WithAttemptTimeout bounds each attempt (default one minute).
func WithAttemptTimeout[T any](d time.Duration) Option[T] {
	return func(o *options[T]) { o.attemptTimeout = d }
}

// WithMaxSourceBytes sets the source size bound (default 2 MiB).
func WithMaxSourceBytes[T any](n int64) Option[T] { return func(o *options[T]) { o.maxBytes = n } }

// WithEnv replaces os.LookupEnv for `env` tags and ${env:NAME} secrets.
func WithEnv[T any](lookup func(string) (string, bool)) Option[T] {
	return func(o *options[T]) { o.lookupEnv = lookup }
}

// WithOverride applies fn to every candidate after the file and the
// environment, before defaults and validation: the place for command-line
// flags, which therefore win over both.
func WithOverride[T any](fn func(*T)) Option[T] {
	return func(o *options[T]) { o.overrides = append(o.overrides, fn) }
}

// WithConsumer registers a consumer under name for changes at or under
// paths (all changes when none are given). Consumers are prepared in
// registration order and aborted in reverse.
func WithConsumer[T any](name string, c Consumer[T], paths ...string) Option[T] {
	return func(o *options[T]) { o.consumers = append(o.consumers, consumerReg[T]{name, paths, c}) }
}

// WithObserver calls fn with every attempt's result, including busy
// refusals, after the attempt ends. Metrics collectors use it. fn must be
// quick and must not call back into the runtime's Reload or Check.
func WithObserver[T any](fn func(Result)) Option[T] {
	return func(o *options[T]) { o.observers = append(o.observers, fn) }
}

// WithRetireHook calls fn when any generation retires.
func WithRetireHook[T any](fn func(*Generation[T])) Option[T] {
	return func(o *options[T]) { o.retireHooks = append(o.retireHooks, fn) }
}

// WithMutationCheck sets what happens when a published configuration is
// found modified in place. The detector is on by default (MutationLog): a
// digest of each generation is taken when it is published and compared
// when each attempt starts (for the active generation) and when the
// generation retires; a difference is reported with its paths in the log,
// in Status and to WithMutationObserver functions. MutationPanic then
// panics; MutationOff turns the detector off. The library reads no
// environment variable for this: a service maps its own flag onto it
// (MutationMode implements encoding.TextUnmarshaler).
func WithMutationCheck[T any](mode MutationMode) Option[T] {
	return func(o *options[T]) { o.mutationMode = mode }
}

// WithMutationObserver calls fn with every mutation the detector reports,
// before a MutationPanic panic. fn must be quick.
func WithMutationObserver[T any](fn func(Mutation)) Option[T] {
	return func(o *options[T]) { o.mutationObservers = append(o.mutationObservers, fn) }
}

// WithProcessResource claims a process-wide resource (the log level, a
// metrics registry) for this runtime, fingerprinted by the bootstrap fields
// at or under paths. Another runtime in the process claiming the same name
// with a different fingerprint fails construction; the same fingerprint
// shares it. The claim is released by Close.
func WithProcessResource[T any](name string, paths ...string) Option[T] {
	return func(o *options[T]) { o.resources = append(o.resources, resource{name, paths}) }
}

// WithChannel makes the runtime one worker of a cluster: New joins at the
// cluster's current version (publishing the local load as version 1 when
// the channel is empty), every publish is a compare-and-set on the
// channel, generation IDs are cluster versions, and literal secrets are
// refused because only references may travel. Versions published by
// others are applied with Runtime.Apply (package propagate does this).
func WithChannel[T any](ch Channel) Option[T] { return func(o *options[T]) { o.channel = ch } }

// WithBaseDir sets the directory that relative paths in `reconf:",file"`
// fields are resolved against (usually the configuration file's). The
// default is the process's working directory.
func WithBaseDir[T any](dir string) Option[T] { return func(o *options[T]) { o.baseDir = dir } }

type resource struct {
	name  string
	paths []string
}
