// Package imagesign owns signing images the way a platform's build pipeline
// does with cosign: a signature over the simple-signing payload (with
// annotations) and in-toto attestations in DSSE envelopes, attached to the
// image in its registry with cosign's library (pkg/oci/...), no transparency
// log. Gantry itself only verifies; this signs the stand-in images of `gantry
// dev` and the images of tests.
package imagesign

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v2/pkg/oci"
	"github.com/sigstore/cosign/v2/pkg/oci/mutate"
	ociremote "github.com/sigstore/cosign/v2/pkg/oci/remote"
	"github.com/sigstore/cosign/v2/pkg/oci/static"
	"github.com/sigstore/cosign/v2/pkg/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	sigpayload "github.com/sigstore/sigstore/pkg/signature/payload"
)

// Signer signs with one key.
type Signer struct {
	sv   signature.SignerVerifier
	priv crypto.Signer
}

// GenerateKey makes an ECDSA P-256 key, cosign's default.
func GenerateKey() (*ecdsa.PrivateKey, error) { return ecdsa.GenerateKey(elliptic.P256(), rand.Reader) }

// New returns a signer for an ECDSA key.
func New(key *ecdsa.PrivateKey) (*Signer, error) {
	sv, err := signature.LoadECDSASignerVerifier(key, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return &Signer{sv: sv, priv: key}, nil
}

// PublicKeyPEM is the public key as the catalog's key files hold it.
func (s *Signer) PublicKeyPEM() ([]byte, error) {
	return cryptoutils.MarshalPublicKeyToPEM(s.priv.Public())
}

// Sign attaches a signature over img (a digest reference) carrying the
// annotations.
func (s *Signer) Sign(ctx context.Context, img name.Digest, annotations map[string]any, opts ...remote.Option) error {
	payload, err := (&sigpayload.Cosign{Image: img, Annotations: annotations}).MarshalJSON()
	if err != nil {
		return err
	}
	sig, err := s.sv.SignMessage(strings.NewReader(string(payload)))
	if err != nil {
		return err
	}
	ociSig, err := static.NewSignature(payload, base64.StdEncoding.EncodeToString(sig))
	if err != nil {
		return err
	}
	return attach(ctx, img, opts, func(se oci.SignedEntity) (oci.SignedEntity, error) {
		return mutate.AttachSignatureToEntity(se, ociSig)
	}, ociremote.WriteSignatures)
}

// Attest attaches an in-toto statement about img with this predicate, in a
// DSSE envelope signed by the key.
func (s *Signer) Attest(ctx context.Context, img name.Digest, predicateType string, predicate any, opts ...remote.Option) error {
	alg, hex, _ := strings.Cut(img.DigestStr(), ":")
	st := map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": img.Context().Name(), "digest": map[string]string{alg: hex}}},
		"predicateType": predicateType,
		"predicate":     predicate,
	}
	body, err := json.Marshal(st)
	if err != nil {
		return err
	}
	env, err := dsse.WrapSigner(s.sv, types.IntotoPayloadType).SignMessage(strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	att, err := static.NewAttestation(env)
	if err != nil {
		return err
	}
	return attach(ctx, img, opts, func(se oci.SignedEntity) (oci.SignedEntity, error) {
		return mutate.AttachAttestationToEntity(se, att)
	}, ociremote.WriteAttestations)
}

// attach reads what is already attached to img, adds one more signature or
// attestation, and writes them back to img's repository.
func attach(ctx context.Context, img name.Digest, opts []remote.Option,
	add func(oci.SignedEntity) (oci.SignedEntity, error),
	write func(name.Repository, oci.SignedEntity, ...ociremote.Option) error) error {
	ro := ociremote.WithRemoteOptions(append(opts, remote.WithContext(ctx))...)
	se, err := ociremote.SignedEntity(img, ro)
	if err != nil {
		return fmt.Errorf("attach to %s: %w", img, err)
	}
	if se, err = add(se); err != nil {
		return err
	}
	return write(img.Context(), se, ro)
}

// ParseKey reads an unencrypted ECDSA private key in PEM ("EC PRIVATE KEY"
// or PKCS #8 "PRIVATE KEY"), as a build pipeline's secret holds it.
// cosign's own encrypted key files are not read here.
func ParseKey(data []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(data)
	if blk == nil {
		return nil, fmt.Errorf("not a PEM key")
	}
	switch blk.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(blk.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, err
		}
		ec, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("a %T key: an ECDSA key is needed", k)
		}
		return ec, nil
	}
	return nil, fmt.Errorf("a PEM %q: an unencrypted EC PRIVATE KEY or PRIVATE KEY is needed (export cosign's with cosign's import/export tools)", blk.Type)
}
