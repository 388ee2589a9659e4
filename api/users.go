package api

import (
	"context"
	"errors"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/user"
)

// noUsers answers user requests on a server built without a user service.
var noUsers = &fault.Unavailable{What: "users", Err: errors.New("not configured on this server")}

func (s *server) ListUsers(ctx context.Context, _ gen.ListUsersRequestObject) (gen.ListUsersResponseObject, error) {
	if s.o.Users == nil {
		return nil, noUsers
	}
	us, err := s.o.Users.List(ctx)
	if err != nil {
		return nil, err
	}
	out := model.UserList{Items: make([]model.User, len(us))}
	for i, u := range us {
		out.Items[i] = userOut(u)
	}
	return gen.ListUsers200JSONResponse(out), nil
}

func (s *server) DeactivateUser(ctx context.Context, req gen.DeactivateUserRequestObject) (gen.DeactivateUserResponseObject, error) {
	if s.o.Users == nil {
		return nil, noUsers
	}
	u, err := s.o.Users.Deactivate(ctx, req.User)
	if err != nil {
		return nil, err
	}
	return gen.DeactivateUser200JSONResponse(userOut(u)), nil
}

func (s *server) ReactivateUser(ctx context.Context, req gen.ReactivateUserRequestObject) (gen.ReactivateUserResponseObject, error) {
	if s.o.Users == nil {
		return nil, noUsers
	}
	u, err := s.o.Users.Reactivate(ctx, req.User)
	if err != nil {
		return nil, err
	}
	return gen.ReactivateUser200JSONResponse(userOut(u)), nil
}

func (s *server) ListUserTokens(ctx context.Context, req gen.ListUserTokensRequestObject) (gen.ListUserTokensResponseObject, error) {
	if s.o.Users == nil || s.o.Tokens == nil {
		return nil, noUsers
	}
	u, err := s.o.Users.Get(ctx, req.User)
	if err != nil {
		return nil, err
	}
	ts, err := s.o.Tokens.ListFor(ctx, u.Key)
	if err != nil {
		return nil, err
	}
	out := model.TokenList{Items: make([]model.TokenInfo, len(ts))}
	for i, t := range ts {
		out.Items[i] = tokenInfo(t)
	}
	return gen.ListUserTokens200JSONResponse(out), nil
}

func (s *server) RevokeUserToken(ctx context.Context, req gen.RevokeUserTokenRequestObject) (gen.RevokeUserTokenResponseObject, error) {
	if s.o.Users == nil || s.o.Tokens == nil {
		return nil, noUsers
	}
	u, err := s.o.Users.Get(ctx, req.User)
	if err != nil {
		return nil, err
	}
	if err := s.o.Tokens.RevokeFor(ctx, u.Key, req.Id); err != nil {
		return nil, err
	}
	return gen.RevokeUserToken204Response{}, nil
}

func userOut(u user.User) model.User {
	out := model.User{Id: u.ID, Issuer: u.Issuer, Subject: u.Subject, Email: strp(u.Email), Name: strp(u.Name), Groups: u.Groups,
		GroupsAt: u.GroupsAt, CreatedAt: u.CreatedAt, LastSeenAt: u.LastSeenAt, Active: u.Active()}
	if out.Groups == nil {
		out.Groups = []string{}
	}
	if !u.Active() {
		out.DeactivatedAt = ptr(u.DeactivatedAt)
	}
	return out
}

// names maps users' keys to how their provider names them (user.Service.Names),
// for the people reading an answer; a failure only leaves names out.
func (s *server) names(ctx context.Context, keys ...string) map[string]string {
	if s.o.Users == nil {
		return nil
	}
	m, err := s.o.Users.Names(ctx, keys...)
	if err != nil {
		s.o.Logger.WarnContext(ctx, "names of users not read", "err", err)
	}
	return m
}

// named sets each workload's ownerName.
func (s *server) named(ctx context.Context, ws ...*model.Workload) {
	keys := make([]string, len(ws))
	for i, w := range ws {
		keys[i] = w.Owner
	}
	m := s.names(ctx, keys...)
	for _, w := range ws {
		if n, ok := m[w.Owner]; ok {
			w.OwnerName = ptr(n)
		}
	}
}
