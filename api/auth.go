package api

import (
	"context"
	"errors"

	"github.com/gantryhq/gantry/api/gen"
	"github.com/gantryhq/gantry/api/model"
	"github.com/gantryhq/gantry/internal/access"
	"github.com/gantryhq/gantry/internal/fault"
	"github.com/gantryhq/gantry/internal/identity"
)

func (s *server) GetAuthConfig(ctx context.Context, _ gen.GetAuthConfigRequestObject) (gen.GetAuthConfigResponseObject, error) {
	if s.o.SignIn.Issuer == "" {
		return nil, &fault.Unavailable{What: "sign-in", Err: errors.New("no OpenID provider configured")}
	}
	return gen.GetAuthConfig200JSONResponse(s.o.SignIn), nil
}

func (s *server) GetMe(ctx context.Context, _ gen.GetMeRequestObject) (gen.GetMeResponseObject, error) {
	id, _ := identity.From(ctx)
	me := model.Me{Issuer: id.Issuer, Subject: id.Subject, Email: strp(id.Email), Name: strp(id.Name), Groups: id.Groups,
		Via: model.MeVia(id.Via), TokenID: strp(id.TokenID), LaunchTeams: []string{}}
	if me.Groups == nil {
		me.Groups = []string{}
	}
	if s.o.Teams != nil {
		all, teams := s.o.Teams(id, access.WorkloadsLaunch)
		me.AllTeams = all
		if teams != nil && !id.ReadOnly {
			me.LaunchTeams = teams
		}
		if id.ReadOnly {
			me.AllTeams = false
		}
	}
	return gen.GetMe200JSONResponse(me), nil
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
