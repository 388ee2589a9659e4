package faultsuite_test

import (
	"testing"

	"github.com/gantryhq/gantry/internal/devcluster"
	"github.com/gantryhq/gantry/internal/devcluster/clustertest"
)

// cluster is the package's own local cluster (GANTRY_TEST_CLUSTER=1): its
// control plane is taken down on purpose, so it is shared with no other
// package. nil when cluster tests were not asked for.
var cluster *devcluster.Cluster

// Kueue logs at verbosity 2: a failed test logs what Kueue did with the
// Jobs it did not admit (dumpQueue).
func TestMain(m *testing.M) {
	clustertest.Main(m, "faults", &cluster, clustertest.Hooks{Options: func(o *devcluster.Options) { o.KueueLogLevel = 2 }})
}
