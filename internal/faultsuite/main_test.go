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

func TestMain(m *testing.M) { clustertest.Main(m, "faults", &cluster) }
