package security

import (
	"os"
	"testing"

	"github.com/gantryhq/gantry/internal/servertest"
)

// TestMain removes the development binary the tests ran (servertest.Binary
// builds it once for all of them).
func TestMain(m *testing.M) { os.Exit(servertest.RemovingBinary(m).Run()) }
