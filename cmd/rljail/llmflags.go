package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/rljail/rljail/bridge"
)

// llmFlags are the flags that say who answers a session's model calls:
// `rljail session`'s and `rljail serve`'s (for the sessions it holds).
func llmFlags(clientUsage string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "llm", Value: "client", Usage: "who answers llm_query and rlm_query: client (" + clientUsage + ") or openai (rljail itself, an OpenAI-compatible endpoint)"},
		&cli.StringFlag{Name: "llm-endpoint", Usage: "with --llm openai: the endpoint's base URL (such as https://api.openai.com/v1) or its chat/completions URL"},
		&cli.StringFlag{Name: "llm-model", Usage: "with --llm openai: the model asked when a call names none"},
		&cli.StringFlag{Name: "llm-key-env", Value: "OPENAI_API_KEY", Usage: "with --llm openai: the variable of rljail's own environment that holds the key (it never enters the jail)"},
		&cli.IntFlag{Name: "llm-concurrency", Value: bridge.DefaultConcurrency, Usage: "with --llm openai: most requests to the endpoint at once"},
	}
}

// llmFromFlags reads the --llm flags: nil for client, or the endpoint's
// answerer and the key it holds (read here from rljail's own
// environment; it goes nowhere but the endpoint's Authorization header).
func llmFromFlags(c *cli.Context) (a *bridge.OpenAI, mode, key string, err error) {
	switch mode = c.String("llm"); mode {
	case "client":
		for _, f := range []string{"llm-endpoint", "llm-model"} {
			if c.IsSet(f) {
				return nil, "", "", fmt.Errorf("--%s needs --llm openai", f)
			}
		}
		return nil, mode, "", nil
	case "openai":
		if c.String("llm-endpoint") == "" {
			return nil, "", "", fmt.Errorf("--llm openai needs --llm-endpoint URL")
		}
		keyEnv := c.String("llm-key-env")
		var ok bool
		key, ok = os.LookupEnv(keyEnv)
		if keyEnv == "" || !ok || key == "" {
			return nil, "", "", fmt.Errorf("--llm openai: the key variable %q is not set in rljail's environment (--llm-key-env)", keyEnv)
		}
		if c.Int("llm-concurrency") < 1 {
			return nil, "", "", fmt.Errorf("--llm-concurrency %d must be 1 at least", c.Int("llm-concurrency"))
		}
		a, err := bridge.NewOpenAI(c.String("llm-endpoint"), c.String("llm-model"), key, c.Int("llm-concurrency"), 2)
		if err != nil {
			return nil, "", "", err
		}
		return a, mode, key, nil
	}
	return nil, "", "", fmt.Errorf("--llm %q: client or openai", mode)
}
