//go:build dev

package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/gantryhq/gantry/internal/audit"
	"github.com/gantryhq/gantry/internal/config"
	"github.com/gantryhq/gantry/internal/devidp"
	"github.com/gantryhq/gantry/internal/devregistry"
	"github.com/gantryhq/gantry/internal/identity"
	"github.com/gantryhq/gantry/internal/imagecat"
	"github.com/gantryhq/gantry/internal/imageverify"
	"github.com/gantryhq/gantry/internal/token"
)

// DevBuild reports whether this binary carries development mode: the
// in-process OpenID provider and the local signed image registry.
const DevBuild = true

// devProvider is the development OpenID provider.
type devProvider interface {
	Issuer() string
	Subject(username string) string // the subject its ID tokens carry for a user
}

type devIDP struct{ *devidp.Provider }

func (d devIDP) Subject(username string) string { return devidp.User{Username: username}.Subject() }

// devSignIn starts the development provider in-process with the configured
// users and two clients: the portal's (a fresh secret each start) and the CLI's.
func devSignIn(ctx context.Context, cfg config.Config, public string, key *rsa.PrivateKey, log *slog.Logger) (config.OIDC, devProvider, error) {
	oc := cfg.OIDC
	secret := make([]byte, 32)
	rand.Read(secret)
	oc.ClientID, oc.ClientSecret, oc.CLIClientID = "gantry-portal", config.Secret(hex.EncodeToString(secret)), "gantry-cli"
	oc.Audiences = []string{oc.ClientID, oc.CLIClientID}
	var users []devidp.User
	var names []string
	for _, u := range cfg.DevLogin.Users {
		users = append(users, devidp.User{Username: u.Username, Password: string(u.Password), Name: u.Name, Email: u.Email, Groups: u.Groups, SecondFactor: u.SecondFactor})
		names = append(names, u.Username)
	}
	dev, err := devidp.Start(ctx, cfg.DevLogin.Listen, devidp.Options{Users: users, Clients: []devidp.Client{
		{ID: oc.ClientID, Secret: string(oc.ClientSecret), RedirectURIs: []string{public + "/auth/callback"}},
		{ID: oc.CLIClientID, Device: true},
	}, SigningKey: key})
	if err != nil {
		return oc, nil, err
	}
	oc.Issuer = dev.Issuer()
	log.Warn("no oidc.issuer configured: signing in with the development OpenID provider (loopback only)", "issuer", oc.Issuer, "users", names)
	return oc, devIDP{dev}, nil
}

// devImages starts the local registry with a signed stand-in for every
// catalog image and returns a verifier that trusts the development key.
func devImages(ctx context.Context, images *imagecat.Catalog, vo imageverify.Options, dataDir string, log *slog.Logger) (*imageverify.Images, error) {
	keyPath := filepath.Join(dataDir, "dev-signing.key")
	key, err := devregistry.LoadOrCreateKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("development signing key: %w", err)
	}
	reg, v, err := devregistry.Verified(ctx, images, key, vo)
	if err != nil {
		return nil, err
	}
	log.Warn("images.devRegistry: stand-in images signed with a development key are trusted (never in production)",
		"registry", reg.Host, "key", keyPath, "images", len(reg.Published))
	return v, nil
}

// devCheckpointKey is the development key audit checkpoints are signed with
// when audit.checkpointKey is not set: made once in the data directory
// (dev-audit-checkpoint.key, and .pub for gantry audit verify --key).
func devCheckpointKey(dataDir string, log *slog.Logger) (string, error) {
	prefix := filepath.Join(dataDir, "dev-audit-checkpoint")
	if _, err := audit.EnsureKeyFiles(prefix); err != nil {
		return "", fmt.Errorf("development audit checkpoint key: %w", err)
	}
	log.Warn("no audit.checkpointKey: audit checkpoints are signed with a development key (never in production)",
		"key", prefix+".key", "public", prefix+".pub")
	return prefix + ".key", nil
}

// DevToken makes a personal access token for a development user, as if they
// had signed in and asked for one.
func (s *Server) DevToken(ctx context.Context, username string) (string, error) {
	if s.dev == nil {
		return "", errors.New("no development provider: sign in and create a token in the portal")
	}
	for _, u := range s.Config.DevLogin.Users {
		if u.Username == username {
			id := identity.Identity{Issuer: s.dev.Issuer(), Subject: s.dev.Subject(u.Username), Email: u.Email, Name: u.Name, Groups: u.Groups, SecondFactor: u.SecondFactor}
			// As if they had just signed in at the development provider.
			if _, err := s.users.Observe(ctx, id); err != nil {
				return "", err
			}
			_, secret, err := s.tokens.Create(identity.With(ctx, id), token.Request{Name: "gantry dev", Lifetime: 24 * time.Hour})
			return secret, err
		}
	}
	return "", fmt.Errorf("no development user %q", username)
}
