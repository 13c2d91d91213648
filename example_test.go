package reconf_test

import (
	"context"
	"fmt"

	"github.com/reconfhq/reconf"
)

type Config struct {
	Server struct {
		Address string `yaml:"address" default:"127.0.0.1:8080"`
	} `yaml:"server" reconf:"restart"`
	Greeting string `yaml:"greeting" reconf:"live" validate:"required"`
}

func Example() {
	src := reconf.Bytes("example", []byte("greeting: hello\n"))
	rt, err := reconf.New[Config](context.Background(), src, reconf.WithLogger(quiet))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rt.Close(context.Background())

	// A request pins the generation it started with.
	pin := rt.Acquire()
	defer pin.Release()
	fmt.Println(pin.ID(), pin.Config().Greeting, pin.Config().Server.Address)
	// Output: 1 hello 127.0.0.1:8080
}

func ExampleRuntime_Reload() {
	data := []byte("greeting: hello\n")
	src := reconf.SourceFunc("example", func(context.Context, reconf.ReadRequest) (reconf.Snapshot, error) {
		return reconf.Snapshot{Data: data}, nil
	})
	rt, _ := reconf.New[Config](context.Background(), src, reconf.WithLogger(quiet))
	defer rt.Close(context.Background())

	data = []byte("greeting: bonjour\n")
	res, _ := rt.Reload(context.Background(), reconf.TriggerSDK)
	fmt.Println(res.Outcome, res.Generation, rt.Current().Config().Greeting)

	data = []byte("greeting: bonjour\nserver:\n  address: 0.0.0.0:80\n")
	res, _ = rt.Reload(context.Background(), reconf.TriggerSDK)
	fmt.Println(res.Outcome, res.HTTPStatus(), res.RestartRequiredFields)
	// Output:
	// published 2 bonjour
	// restart-required 409 [server.address]
}
