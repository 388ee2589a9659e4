// Package carbon owns the grid's carbon intensity where and when work ran
// (grams of CO2-equivalent per kWh): from static hourly profiles per site
// in a file the platform team keeps, or from a service that speaks the
// Green Software Foundation's Carbon Aware SDK API
// (`/emissions/bylocation`), cached by location and hour and refreshed.
// Every figure carries the name of the source it came from. Showback turns
// a workload's kWh into kg CO2e with it (docs/energy.md).
package carbon

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/yamldoc"
)

// Source says the grid's carbon intensity at a location, hour by hour.
type Source interface {
	// Name says where the figures come from, for every figure shown.
	Name() string
	// Intensity is the mean intensity (gCO2e/kWh) of each hour (UTC, its
	// start) in [from, to) at location; an hour the source has no figure
	// for is absent. An unknown location is *fault.NotFound.
	Intensity(ctx context.Context, location string, from, to time.Time) (map[time.Time]float64, error)
}

// Profiles is a Source of static hourly profiles: for each site, 24
// intensities, one per hour of the day (UTC), every day alike.
type Profiles struct {
	file  string
	sites map[string][24]float64
}

// APIVersion and Kind of a profiles file.
const (
	APIVersion = "gantry.dev/v1"
	Kind       = "CarbonProfiles"
)

// ProfilesFile is the file's shape: sites by name, each 24 hourly values.
type ProfilesFile struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Sites      map[string][]float64 `json:"sites"`
}

// LoadProfiles reads a profiles file; its problems name file:line.
func LoadProfiles(path string) (*Profiles, error) {
	data, err := yamldoc.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseProfiles(path, data)
}

// ParseProfiles parses the profiles of file.
func ParseProfiles(file string, data []byte) (*Profiles, error) {
	return yamldoc.Parse(file, data, func(f ProfilesFile) (*Profiles, error) {
		var errs fault.List
		yamldoc.Header(&errs, f.APIVersion, f.Kind, APIVersion, Kind)
		p := &Profiles{file: file, sites: map[string][24]float64{}}
		if len(f.Sites) == 0 {
			errs.Addf("sites", "name at least one site")
		}
		for name, vs := range f.Sites {
			at := "sites." + name
			if len(vs) != 24 {
				errs.Addf(at, "%d values: want 24, one per hour of the day (UTC)", len(vs))
				continue
			}
			var day [24]float64
			for h, v := range vs {
				if math.IsNaN(v) || v < 0 || v > 2000 {
					errs.Addf(fmt.Sprintf("%s[%d]", at, h), "%g: gCO2e/kWh from 0 to 2000", v)
				}
				day[h] = v
			}
			p.sites[name] = day
		}
		return p, errs.Err()
	})
}

// Name implements Source.
func (p *Profiles) Name() string { return "static hourly profiles (" + p.file + ")" }

// Intensity implements Source.
func (p *Profiles) Intensity(_ context.Context, location string, from, to time.Time) (map[time.Time]float64, error) {
	day, ok := p.sites[location]
	if !ok {
		return nil, &fault.NotFound{Kind: "carbon profile", Name: location}
	}
	out := map[time.Time]float64{}
	for h := from.UTC().Truncate(time.Hour); h.Before(to); h = h.Add(time.Hour) {
		out[h] = day[h.Hour()]
	}
	return out, nil
}

// Grams is the carbon of energy used hour by hour (kWh by hour start) at
// intensities by hour: the sum of each hour's kWh times its intensity.
// Unrated is the kWh of hours the intensities lack.
func Grams(kwh map[time.Time]float64, intensity map[time.Time]float64) (grams, unrated float64) {
	for h, k := range kwh {
		i, ok := intensity[h.UTC().Truncate(time.Hour)]
		if !ok {
			unrated += k
			continue
		}
		grams += k * i
	}
	return grams, unrated
}
