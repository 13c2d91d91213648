package reconf

// Observer is told every attempt's result (see WithObserver).
type Observer interface {
	Observe(Result)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Result)

// Observe calls f.
func (f ObserverFunc) Observe(res Result) { f(res) }

// StatusObserver is an Observer that also reports the runtime's state (a
// metrics collector's gauges). New hands it the runtime's Status method
// once the runtime is running, so binding is not a second step a user can
// forget.
type StatusObserver interface {
	Observer
	BindStatus(status func() Status)
}
