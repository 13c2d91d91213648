package reconf

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/reconfhq/reconf/internal/fleet"
	"github.com/reconfhq/reconf/internal/restartopt"
)

// Defaults of the runtime's options, which their docs state.
const (
	defaultRetention      = 8
	defaultAttemptTimeout = time.Minute
)

// Option configures a Runtime. Most options do not depend on the
// configuration type; those that do (WithConsumer, WithOverride,
// WithRetireHook) take it from their argument, and New refuses one made
// for another type.
type Option func(*settings)

// settings is what options set, before New knows the type.
type settings struct {
	logger            *slog.Logger
	retention         int
	attemptTimeout    time.Duration
	maxBytes          int64
	lookupEnv         func(string) (string, bool)
	observers         []Observer
	mutationMode      MutationMode
	mutationObservers []func(Mutation)
	now               func() time.Time
	channel           fleet.Channel
	baseDir           string
	firstGen          uint64
	startupPublish    bool // restartopt.Restart.StartupPublish
	health            HealthFunc
	processWide       []string            // WithProcessWide
	recorded          int                 // WithRecordedGenerations
	markStore         fleet.RollbackStore // WithRollbackStore
	// typed holds, in the order given, the options that carry a value of
	// the configuration type: a consumerReg[T], a func(*T) override or a
	// func(*Generation[T]) retire hook.
	typed []typedOption
}

type typedOption struct {
	option string // for the error when T does not match
	v      any
}

// options are a runtime's settings with the typed ones resolved.
type options[T any] struct {
	settings
	overrides   []func(*T)
	restart     func(*T) // restartopt.Restart.Values
	consumers   []consumerReg[T]
	retireHooks []func(*Generation[T])
}

// resolve checks every typed option against T and sorts it in.
func (o *options[T]) resolve() error {
	var errs []error
	for _, t := range o.typed {
		switch v := t.v.(type) {
		case consumerReg[T]:
			o.consumers = append(o.consumers, v)
		case func(*T):
			o.overrides = append(o.overrides, v)
		case restartValues:
			fn, ok := v.fn.(func(*T))
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("reconf: restart values were made for another configuration type (%T), not %s", v.fn, reflect.TypeFor[T]()))
			case o.restart != nil:
				errs = append(errs, errors.New("reconf: restart values were given twice"))
			default:
				o.restart = fn
			}
		case func(*Generation[T]):
			o.retireHooks = append(o.retireHooks, v)
		default:
			errs = append(errs, fmt.Errorf("reconf: %s was made for another configuration type (%T), not %s", t.option, t.v, reflect.TypeFor[T]()))
		}
	}
	o.typed = nil
	return errors.Join(errs...)
}

func init() { restartopt.Option = func(r restartopt.Restart) any { return restartOption(r) } }

// restartOption is the option of a process's restart plumbing, which
// reaches New through package restartopt only (see there).
func restartOption(r restartopt.Restart) Option {
	return func(o *settings) {
		if r.FirstGeneration != 0 {
			o.firstGen = r.FirstGeneration
		}
		if r.StartupPublish {
			o.startupPublish = true
		}
		if r.Values != nil {
			o.typed = append(o.typed, typedOption{"restart values", restartValues{r.Values}})
		}
	}
}

// WithLogger sets where the runtime writes its one record per attempt.
// The default is slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *settings) { o.logger = l } }

// WithRetention sets the retained-generation budget: the active generation
// plus old ones still pinned. A publish that would exceed it is
// retention-blocked. The default is 8; values below 2 are raised to 2.
func WithRetention(n int) Option {
	return func(o *settings) { o.retention = max(n, 2) }
}

// WithAttemptTimeout bounds each attempt (default one minute).
func WithAttemptTimeout(d time.Duration) Option {
	return func(o *settings) { o.attemptTimeout = d }
}

// WithMaxSourceBytes sets the source size bound (default 2 MiB).
func WithMaxSourceBytes(n int64) Option { return func(o *settings) { o.maxBytes = n } }

// WithEnv replaces os.LookupEnv for `env` tags and ${env:NAME} secrets.
func WithEnv(lookup func(string) (string, bool)) Option {
	return func(o *settings) { o.lookupEnv = lookup }
}

// WithOverride applies fn to every candidate after the file and the
// environment, before defaults and validation: the place for command-line
// flags, which therefore win over both.
func WithOverride[T any](fn func(*T)) Option {
	return func(o *settings) { o.typed = append(o.typed, typedOption{"WithOverride", fn}) }
}

// restartValues holds restartopt.Restart.Values, a func(*T), a type of
// its own so that resolve tells it from an override.
type restartValues struct{ fn any }

// WithConsumer registers a consumer under key for changes at or under
// paths (all changes when none are given). Consumers are prepared in
// registration order and aborted in reverse. The values the consumer
// attaches to generations (see Valuer) are read with key.Get; a value
// that is not a V fails the attempt as preparation-failed. A consumer
// that attaches no value can use a Name. Every path must name a field of
// T (see ErrUnknownPath).
func WithConsumer[T, V any](key Key[V], c Consumer[T], paths ...string) Option {
	reg := consumerReg[T]{name: string(key), paths: paths, c: c, fits: func(v any) bool { _, ok := v.(V); return ok }, valueType: reflect.TypeFor[V]()}
	return func(o *settings) { o.typed = append(o.typed, typedOption{"WithConsumer(" + string(key) + ")", reg}) }
}

// WithObserver tells obs every attempt's result, including busy refusals,
// after the attempt ends; an obs that is also a StatusObserver is handed
// the runtime's Status when New returns, so a metrics collector needs no
// second call. Observe must be quick and must not call back into the
// runtime's Reload or Check; a panic in it is logged.
func WithObserver(obs Observer) Option {
	return func(o *settings) { o.observers = append(o.observers, obs) }
}

// WithRetireHook calls fn when any generation retires.
func WithRetireHook[T any](fn func(*Generation[T])) Option {
	return func(o *settings) { o.typed = append(o.typed, typedOption{"WithRetireHook", fn}) }
}

// WithMutationCheck sets what happens when a published configuration is
// found modified in place. The detector is on by default (MutationLog): a
// digest of each generation is taken when it is published and compared
// during each attempt (for the active generation: just before the swap
// when the attempt publishes, else when it ends) and when the generation
// retires (unless it retires at that swap, just checked); a difference is reported with its paths in the log,
// in Status and to WithMutationObserver functions. MutationPanic then
// panics; MutationOff turns the detector off. The library reads no
// environment variable for this: a service maps its own flag onto it
// (MutationMode implements encoding.TextUnmarshaler).
func WithMutationCheck(mode MutationMode) Option {
	return func(o *settings) { o.mutationMode = mode }
}

// WithMutationObserver calls fn with every mutation the detector reports,
// before a MutationPanic panic. fn must be quick.
func WithMutationObserver(fn func(Mutation)) Option {
	return func(o *settings) { o.mutationObservers = append(o.mutationObservers, fn) }
}

// withChannel makes the runtime one worker of a cluster (see
// fleet.WithChannel, and package propagate's Channel.Option).
func withChannel(ch fleet.Channel) Option { return func(o *settings) { o.channel = ch } }

// WithBaseDir sets the directory that relative paths in `reconf:",file"`
// fields are resolved against (usually the configuration file's). The
// default is the process's working directory.
func WithBaseDir(dir string) Option { return func(o *settings) { o.baseDir = dir } }

// WithHealth sets the function that judges every step of a rollout (see
// Runtime.Stage). It receives both generations' figures over the step's
// window, measured by the runtime's Recorder, and may use them, its own
// measurements, or both; StandardHealth, the default, applies the
// strategy's thresholds.
func WithHealth(fn HealthFunc) Option { return func(o *settings) { o.health = fn } }
