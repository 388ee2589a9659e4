package interactive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gantryhq/gantry/internal/template"
	"github.com/gantryhq/gantry/internal/workload"
)

// Apps says where a running notebook's app listens, for Gantry's own
// requests (workload.Service.AppTarget).
type Apps interface {
	AppTarget(ctx context.Context, w workload.Workload) (workload.Target, error)
}

// Kernels asks a notebook's app whether one of its Jupyter kernels is
// executing now, for the idle culler: a cell started from a tab that was
// then closed runs with no socket for the proxy to watch, and its app is
// the only one that knows. It asks the Jupyter server's REST API (GET
// {base}api/kernels: each kernel's execution_state, which the server
// follows from the kernel's own status messages), through the proxy's
// transports, with no credentials (Gantry's notebooks run without Jupyter's
// token: the proxy and the NetworkPolicy admit nothing else). An app that
// is not Jupyter answers something else, and has no kernel executing.
type Kernels struct {
	apps  Apps
	proxy *Proxy // its transports only
}

// NewKernels is a Kernels reaching apps as the proxy does: transport (nil:
// its own) and workers (nil: no worker clusters).
func NewKernels(apps Apps, transport http.RoundTripper, workers Workers) (*Kernels, error) {
	if apps == nil {
		return nil, errors.New("interactive.NewKernels: Apps is required")
	}
	return &Kernels{apps: apps, proxy: &Proxy{Transport: transport, Workers: workers}}, nil
}

// kernelsTimeout bounds one question to an app (a Jupyter server answers
// its list from memory); maxKernelsBody what of its answer is read (a
// kernel's entry is a few hundred bytes).
const (
	kernelsTimeout = 2 * time.Second
	maxKernelsBody = 1 << 20
)

// Busy says whether a kernel of w's app is executing now. An answer that
// is not a Jupyter server's list of kernels is false; an app that does not
// answer is an error.
func (k *Kernels) Busy(ctx context.Context, w workload.Workload) (bool, error) {
	t, err := k.apps.AppTarget(ctx, w)
	if err != nil {
		return false, err
	}
	tr, err := k.proxy.transportFor(w.ID, t)
	if err != nil {
		return false, err
	}
	u := *t.URL
	u.Path, u.RawPath, u.RawQuery = template.BasePath(w.ID)+"api/kernels", "", ""
	if t.StripPrefix {
		u.Path = "/api/kernels"
	}
	ctx, cancel := context.WithTimeout(ctx, kernelsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return false, fmt.Errorf("interactive: asking workload %s's app for its kernels: %w", w.ID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, nil // not Jupyter, or nothing to say
	}
	var kernels []struct {
		ExecutionState string `json:"execution_state"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, maxKernelsBody)).Decode(&kernels) != nil {
		return false, nil
	}
	for _, kr := range kernels {
		if kr.ExecutionState == "busy" {
			return true, nil
		}
	}
	return false, nil
}
