package main

import (
	"context"
	"fmt"
	"io"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/store"
)

// auditVerifyCmd walks the audit log and names every record that was changed,
// deleted or inserted behind Gantry's back; exit 1 if any.
func auditVerifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("gantry audit verify", stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML); also $GANTRY_CONFIG")
	db := fs.String("db", "", "database: SQLite file or PostgreSQL URL (default: from the configuration)")
	dbDriver := fs.String("db-driver", "", "database driver: sqlite or postgres")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) > 0 {
		return usageError{"verify takes no arguments"}
	}
	cfg, err := loadConfig(*cfgPath, config.Flags{"db": *db, "db-driver": *dbDriver})
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.Database.Driver, string(cfg.Database.DSN))
	if err != nil {
		return err
	}
	defer st.Close()
	n, problems, err := audit.Verify(ctx, st)
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		fmt.Fprintf(stdout, "audit log intact: %d records, hash chain verified\n", n)
		return nil
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
	}
	return fmt.Errorf("audit log tampered with: %d problem(s) in %d records", len(problems), n)
}
