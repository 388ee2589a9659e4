package imageverify

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
)

// dockerConfig is the shape of ~/.docker/config.json and of a Kubernetes pull
// secret's .dockerconfigjson.
type dockerConfig struct {
	Auths map[string]struct {
		Auth     string `json:"auth"`
		Username string `json:"username"`
		Password string `json:"password"`
	} `json:"auths"`
}

// Keychain reads registry credentials from a docker config file or a pull
// secret's .dockerconfigjson. Errors never include the credentials.
func Keychain(data []byte) (authn.Keychain, error) {
	var c dockerConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("registry credentials: not a docker config (want {\"auths\": {...}}): %v", err)
	}
	k := keychain{}
	for host, a := range c.Auths {
		cfg := authn.AuthConfig{Username: a.Username, Password: a.Password}
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("registry credentials for %s: auth is not base64 of user:password", host)
			}
			cfg.Username, cfg.Password = user, pass
		}
		k[normalize(host)] = cfg
	}
	return k, nil
}

type keychain map[string]authn.AuthConfig

// Resolve implements authn.Keychain.
func (k keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if cfg, ok := k[normalize(r.RegistryStr())]; ok {
		return authn.FromConfig(cfg), nil
	}
	return authn.Anonymous, nil
}

// normalize turns "https://index.docker.io/v1/" and "index.docker.io" alike.
func normalize(host string) string {
	host = strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")
	host, _, _ = strings.Cut(host, "/")
	if host == "docker.io" || host == "registry-1.docker.io" {
		return "index.docker.io"
	}
	return host
}
