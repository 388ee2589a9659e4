package api

import (
	"context"
	"time"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/token"
)

func (s *server) CreateToken(ctx context.Context, req gen.CreateTokenRequestObject) (gen.CreateTokenResponseObject, error) {
	if s.o.Tokens == nil {
		return nil, noTokens
	}
	b := req.Body
	t, secret, err := s.o.Tokens.Create(ctx, token.Request{Name: b.Name, Lifetime: time.Duration(b.ExpiresInDays) * 24 * time.Hour,
		Team: deref(b.Team), ReadOnly: deref(b.ReadOnly)})
	if err != nil {
		return nil, err
	}
	i := tokenInfo(t)
	return gen.CreateToken201JSONResponse{Id: i.Id, Name: i.Name, Team: i.Team, ReadOnly: i.ReadOnly, CreatedAt: i.CreatedAt,
		ExpiresAt: i.ExpiresAt, Revoked: i.Revoked, Token: secret}, nil
}

func (s *server) ListTokens(ctx context.Context, _ gen.ListTokensRequestObject) (gen.ListTokensResponseObject, error) {
	if s.o.Tokens == nil {
		return nil, noTokens
	}
	ts, err := s.o.Tokens.List(ctx)
	if err != nil {
		return nil, err
	}
	out := model.TokenList{Items: make([]model.TokenInfo, len(ts))}
	for i, t := range ts {
		out.Items[i] = tokenInfo(t)
	}
	return gen.ListTokens200JSONResponse(out), nil
}

func (s *server) RevokeToken(ctx context.Context, req gen.RevokeTokenRequestObject) (gen.RevokeTokenResponseObject, error) {
	if s.o.Tokens == nil {
		return nil, noTokens
	}
	if err := s.o.Tokens.Revoke(ctx, req.Id); err != nil {
		return nil, err
	}
	return gen.RevokeToken204Response{}, nil
}

func tokenInfo(t token.Token) model.TokenInfo {
	i := model.TokenInfo{Id: t.ID, Name: t.Name, ReadOnly: t.ReadOnly, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, Revoked: !t.RevokedAt.IsZero()}
	if t.Team != "" {
		i.Team = ptr(t.Team)
	}
	return i
}
