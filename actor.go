package reconf

import "context"

// actorKey is the context key of WithActor.
type actorKey struct{}

// WithActor returns a context that names who starts an attempt with it
// ("api token deploy-bot", "api cert CN=ops"). Reload, Apply and Check
// copy it into Result.Actor, and from there into the history, so an
// operator can tell who changed what. Without it the actor is the
// trigger's default: "signal" for SIGHUP, "sdk" for the SDK, "startup",
// "api", "cluster", "check". An actor must not be secret: it is shown.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// actorOf returns the actor set on ctx, or trigger's default.
func actorOf(ctx context.Context, trigger Trigger) string {
	if a, ok := ctx.Value(actorKey{}).(string); ok && a != "" {
		return a
	}
	if trigger == TriggerSIGHUP {
		return "signal"
	}
	return string(trigger)
}
