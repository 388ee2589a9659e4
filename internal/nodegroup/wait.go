package nodegroup

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// PoolState is what a group's machines are doing now, as the cluster and its
// autoscaler say.
type PoolState struct {
	Group Group
	// Nodes are the group's machines that have joined the cluster.
	Nodes int
	// Booting are machines asked for that have not joined yet; Since is
	// when the oldest of them was asked for.
	Booting int
	Since   time.Time
	// Failed is the autoscaler's reason for the latest machine it could not
	// get ("" when none failed), at FailedAt.
	Failed   string
	FailedAt time.Time
}

// AtMax reports whether the group has all the machines it may have.
func (p PoolState) AtMax() bool { return p.Nodes+p.Booting >= p.Group.Max }

// WaitReason says why a pod the scheduler cannot place waits for capacity,
// from the states of the groups that could hold it (its class's, spot ones
// only when it may use spot), in order of what it means for the person
// waiting: a machine booting for it, a scale-up that failed, a group with
// room the autoscaler has not asked a machine of yet, every group at its
// max. ok is false when no group could hold it (the scheduler's own words
// stay).
func WaitReason(pools []PoolState, now time.Time) (reason string, ok bool) {
	if len(pools) == 0 {
		return "", false
	}
	var booting []PoolState
	for _, p := range pools {
		if p.Booting > 0 {
			booting = append(booting, p)
		}
	}
	if len(booting) > 0 {
		sort.Slice(booting, func(i, j int) bool { return booting[i].Since.Before(booting[j].Since) })
		p := booting[0]
		return fmt.Sprintf("waiting for capacity: scale-up of %d × %s node (%d GPUs each) requested %s ago (typical boot %s)",
			p.Booting, p.Group.Name, p.Group.GPUsPerNode, ago(now, p.Since), short(p.Group.Boot())), true
	}
	var failed []PoolState
	for _, p := range pools {
		if p.Failed != "" && !p.AtMax() {
			failed = append(failed, p)
		}
	}
	if len(failed) > 0 {
		sort.Slice(failed, func(i, j int) bool { return failed[i].FailedAt.After(failed[j].FailedAt) })
		p := failed[0]
		return fmt.Sprintf("scale-up of node group %s failed %s ago: %s; the autoscaler retries", p.Group.Name, ago(now, p.FailedAt), p.Failed), true
	}
	for _, p := range pools {
		if !p.AtMax() && p.Group.Purchase != Reserved {
			return fmt.Sprintf("waiting for capacity: node group %s can add a machine (%d GPUs, typical boot %s; %d of %d now)",
				p.Group.Name, p.Group.GPUsPerNode, short(p.Group.Boot()), p.Nodes, p.Group.Max), true
		}
	}
	var full []string
	for _, p := range pools {
		if !p.AtMax() {
			return "", false // a reserved machine missing: not the autoscaler's to add
		}
		full = append(full, fmt.Sprintf("%s at its max (%d of %d nodes)", p.Group.Name, p.Nodes+p.Booting, p.Group.Max))
	}
	sort.Strings(full)
	return "node group " + strings.Join(full, "; node group ") + ": waiting for running work to end", true
}

// ago is a short, whole-second duration since t ("0s" for the future).
func ago(now, t time.Time) string {
	if t.IsZero() || now.Before(t) {
		return "0s"
	}
	return short(now.Sub(t))
}

// short writes a duration to the second without trailing zero units
// (3m, 1m30s, 45s).
func short(d time.Duration) string {
	d = d.Round(time.Second)
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
