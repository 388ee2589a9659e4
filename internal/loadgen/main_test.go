package loadgen_test

import (
	"os"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
)

// TestMain removes the gantry binary the outside benchmarks ran.
func TestMain(m *testing.M) { os.Exit(servertest.RemovingBinary(m).Run()) }
