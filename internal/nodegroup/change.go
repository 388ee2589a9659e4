package nodegroup

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/fault"
)

// Change is the platform team's edit of one group through the API: each
// field it sets replaces the file's, the rest stay as the file has them.
// What the machine is — its class, purchase kind and GPUs per node — stays
// in the file: another machine is another instance type, which the
// provider (and the autoscaler's configuration) must offer first.
//
// Its JSON is the API's request (NodeGroupRequest), times in seconds.
type Change struct {
	Max              *int     `json:"max,omitempty"`
	PricePerNodeHour *float64 `json:"pricePerNodeHour,omitempty"`
	BootTimeSeconds  *int     `json:"bootTimeSeconds,omitempty"`
	QuietTimeSeconds *int     `json:"quietTimeSeconds,omitempty"`
	WarmPerDay       *float64 `json:"warmPerDay,omitempty"`
}

// Changed is the group name with c laid over it, checked as the file is;
// a problem's field path is the change's own ("max"). A group the set does
// not hold is a *fault.NotFound.
func (s *Set) Changed(name string, c Change, classes []string) (Group, error) {
	g, ok := s.Get(name)
	if !ok {
		return Group{}, &fault.NotFound{Kind: "node group", Name: name}
	}
	var errs fault.List
	if c == (Change{}) {
		errs.Addf("", "nothing to change: set max, pricePerNodeHour, bootTimeSeconds, quietTimeSeconds or warmPerDay")
	}
	if c.Max != nil {
		if g.Purchase == Reserved {
			errs.Addf("max", "a reserved group's machines are bought whole: change its min and max in the node groups file")
		}
		g.Max = *c.Max
	}
	if c.PricePerNodeHour != nil {
		g.PricePerNodeHour = *c.PricePerNodeHour
	}
	seconds := func(path string, v *int, into *config.Duration) {
		switch {
		case v == nil:
		case *v <= 0 || *v > maxSeconds:
			errs.Addf(path, "%d: must be between 1 and %d seconds", *v, maxSeconds)
		default:
			*into = config.Duration(time.Duration(*v) * time.Second)
		}
	}
	seconds("bootTimeSeconds", c.BootTimeSeconds, &g.BootTime)
	seconds("quietTimeSeconds", c.QuietTimeSeconds, &g.QuietTime)
	if c.WarmPerDay != nil {
		g.WarmPerDay = *c.WarmPerDay
	}
	if err := errs.Err(); err != nil {
		return Group{}, err
	}
	if _, err := New(File{APIVersion: APIVersion, Kind: Kind, Groups: []Group{g}}, classes); err != nil {
		var inv *fault.Invalid
		if errors.As(err, &inv) {
			for i := range inv.Fields {
				p := strings.TrimPrefix(inv.Fields[i].Path, "groups[0].")
				if p == "bootTime" || p == "quietTime" {
					p += "Seconds"
				}
				inv.Fields[i].Path = p
			}
		}
		return Group{}, err
	}
	return g, nil
}

// maxSeconds bounds a change's boot and quiet time (a day).
const maxSeconds = 86400

// With is the set with changes (by group name) laid over its groups. A
// change that does not hold (its group gone from the file, a value the
// file's group no longer allows) is left out and named in the error, under
// the group's name; the others are in the set returned.
func (s *Set) With(changes map[string]Change, classes []string) (*Set, error) {
	groups := s.List()
	names := make([]string, 0, len(changes))
	for n := range changes {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs fault.List
	for _, n := range names {
		g, err := s.Changed(n, changes[n], classes)
		if err != nil {
			errs.AddErr(n, err)
			continue
		}
		i := slices.IndexFunc(groups, func(x Group) bool { return x.Name == n })
		groups[i] = g
	}
	out, err := New(File{APIVersion: APIVersion, Kind: Kind, Groups: groups}, classes)
	if err != nil {
		return nil, fmt.Errorf("node groups with the platform's edits: %w", err)
	}
	return out, errs.Err()
}
