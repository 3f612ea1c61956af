package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"
)

func init() {
	register(command{name: "healthcheck", summary: "GET a health URL and exit 0 when it answers 2xx (for container health checks)", run: runHealthcheck})
}

// envHealthURL overrides healthcheck's default URL, so one image's
// HEALTHCHECK fits a frontend and a worker.
const envHealthURL = "SWITCHYARD_HEALTH_URL"

func runHealthcheck(ctx context.Context, args []string, env Env) int {
	fs := newFlagSet("healthcheck", "GETs a health URL and exits 0 when it answers 2xx, 1 otherwise: a container HEALTHCHECK\nfor images without curl. A frontend's /health answers 503 while no worker can serve.")
	def := os.Getenv(envHealthURL)
	if def == "" {
		def = "http://127.0.0.1:8000/health"
	}
	url := fs.String("url", def, "URL to GET (default: $"+envHealthURL+", else the frontend's /health on port 8000)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard healthcheck: --url %q: %v\n", *url, err)
		return ExitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(env.Stderr, "switchyard healthcheck: %v (is the process listening there?)\n", err)
		return ExitFail
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		fmt.Fprintf(env.Stderr, "switchyard healthcheck: %s answered %d\n", *url, resp.StatusCode)
		return ExitFail
	}
	fmt.Fprintf(env.Stdout, "ok: %s answered %d\n", *url, resp.StatusCode)
	return ExitOK
}
