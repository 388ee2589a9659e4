package authn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// signingAlgs are the algorithms a token may be signed with (the verifier
// checks the header's alg against the same list before the key set sees it).
var signingAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA,
}

// refetchEvery is how often a signature no cached key verifies may make
// Gantry fetch the provider's JWKS again. go-oidc's RemoteKeySet fetches on
// every such token, so each forged token with a known key id cost a request
// to the provider; here the first miss after a quiet interval refetches (a
// rotated key is picked up at once) and later misses in the interval do not.
const refetchEvery = time.Minute

// keySet is the provider's JWKS, cached, fetched again at most once per
// refetchEvery when a signature does not verify.
type keySet struct {
	url    string
	client *http.Client
	now    func() time.Time

	mu          sync.Mutex // held while fetching
	keys        atomic.Pointer[[]jose.JSONWebKey]
	lastRefetch time.Time
	fetches     atomic.Int64
}

func newKeySet(ctx context.Context, url string, now func() time.Time) (*keySet, error) {
	k := &keySet{url: url, client: &http.Client{Timeout: 10 * time.Second}, now: now}
	keys, err := k.fetch(ctx)
	if err != nil {
		return nil, err
	}
	k.keys.Store(&keys)
	return k, nil
}

// VerifySignature implements oidc.KeySet.
func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, signingAlgs)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("want exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	if payload, ok := verifyWith(jws, kid, *k.keys.Load()); ok {
		return payload, nil
	}
	keys, err := k.refetch(ctx)
	if err != nil {
		return nil, err
	}
	if payload, ok := verifyWith(jws, kid, keys); ok {
		return payload, nil
	}
	return nil, errors.New("no key the provider publishes verifies this signature")
}

func verifyWith(jws *jose.JSONWebSignature, kid string, keys []jose.JSONWebKey) ([]byte, bool) {
	for _, key := range keys {
		if kid != "" && key.KeyID != kid {
			continue
		}
		if payload, err := jws.Verify(&key); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// refetch fetches the JWKS again unless that happened less than refetchEvery
// ago; concurrent callers wait for one fetch.
func (k *keySet) refetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.lastRefetch.IsZero() && k.now().Sub(k.lastRefetch) < refetchEvery {
		return nil, fmt.Errorf("no cached key verifies this signature (the key set was fetched again %v ago; next in at most %v)",
			k.now().Sub(k.lastRefetch).Round(time.Second), refetchEvery)
	}
	k.lastRefetch = k.now() // a failed fetch counts too: a provider that is down is not hammered
	keys, err := k.fetch(ctx)
	if err != nil {
		return nil, err
	}
	k.keys.Store(&keys)
	return keys, nil
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	k.fetches.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", k.url, err)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", k.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks %s: %s", k.url, resp.Status)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("jwks %s: %w", k.url, err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range set.Keys {
		var key jose.JSONWebKey
		// Keys of types go-jose does not know (Ed448, X448, …) are skipped,
		// as RFC 7517 §5 asks, rather than failing the whole set.
		if err := json.Unmarshal(raw, &key); err != nil || !key.IsPublic() || (key.Use != "" && key.Use != "sig") {
			continue
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("jwks %s: no signing keys", k.url)
	}
	return keys, nil
}
