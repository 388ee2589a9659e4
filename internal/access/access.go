// Package access owns the vocabulary of access control: the permissions
// routes declare and the domain checks. A Permission is a value of this
// package, never a string a caller spells, so a typo is a compile error
// rather than a silent deny; the spec's x-gantry-permission strings and
// casbin's object:action pairs are parsed and checked at start-up.
package access

import "strings"

// Permission is something a caller may be allowed to do in a team.
type Permission struct{ name string }

// String is the permission's object:action form, as policy files and the
// spec write it.
func (p Permission) String() string { return p.name }

// Object and Action are the two halves of String.
func (p Permission) Object() string { o, _, _ := strings.Cut(p.name, ":"); return o }

// Action is the action half of String.
func (p Permission) Action() string { _, a, _ := strings.Cut(p.name, ":"); return a }

// Permissions.
var (
	TemplatesRead      = Permission{"templates:read"}
	TemplatesWrite     = Permission{"templates:write"}
	GPUClassesRead     = Permission{"gpu-classes:read"}
	GPUClassesWrite    = Permission{"gpu-classes:write"}
	ImagesRead         = Permission{"images:read"}
	ImagesWrite        = Permission{"images:write"}
	PolicyRead         = Permission{"policy:read"}
	PolicyWrite        = Permission{"policy:write"}
	WorkloadsRead      = Permission{"workloads:read"}
	WorkloadsLaunch    = Permission{"workloads:launch"}
	WorkloadsManage    = Permission{"workloads:manage"}
	OwnWorkloadsManage = Permission{"own-workloads:manage"} // the caller's own workloads only
	MembersManage      = Permission{"members:manage"}
	AuditRead          = Permission{"audit:read"}
	UsersManage        = Permission{"users:manage"}      // list and deactivate users, revoke anyone's token
	NodesRead          = Permission{"nodes:read"}        // GPU nodes: their GPUs, health and current use
	WorkloadsApprove   = Permission{"workloads:approve"} // approve or deny launches held for approval
)

// All lists every permission.
var All = []Permission{
	TemplatesRead, TemplatesWrite, GPUClassesRead, GPUClassesWrite, ImagesRead, ImagesWrite,
	PolicyRead, PolicyWrite, WorkloadsRead, WorkloadsLaunch, WorkloadsManage, OwnWorkloadsManage,
	MembersManage, AuditRead, UsersManage, NodesRead, WorkloadsApprove,
}

// Parse finds the permission written as s (object:action).
func Parse(s string) (Permission, bool) {
	for _, p := range All {
		if p.name == s {
			return p, true
		}
	}
	return Permission{}, false
}

// Names lists every permission's String, for messages.
func Names() []string {
	out := make([]string, len(All))
	for i, p := range All {
		out[i] = p.name
	}
	return out
}

// ReadOnly reports whether the permission only reads.
func (p Permission) ReadOnly() bool { return p.Action() == "read" }

// platformScoped are the permissions that act on the whole platform rather
// than in one team: a token narrowed to a team never holds them, whoever
// made it.
var platformScoped = map[Permission]bool{
	TemplatesWrite: true, GPUClassesWrite: true, ImagesWrite: true,
	PolicyRead: true, PolicyWrite: true, AuditRead: true, UsersManage: true, NodesRead: true,
}

// PlatformScoped reports whether the permission acts on the whole platform
// (the catalog's and policy's writes, the audit log) rather than in a team.
func (p Permission) PlatformScoped() bool { return platformScoped[p] }

// Use is what one launch would use from a team's entitlements (the policy's
// teams section): the template, the GPU class, the storage classes its
// volumes name ("" for the cluster's default) and, for a VM, its user.
type Use struct {
	Template       string
	GPUClass       string
	StorageClasses []string
	VMUser         string
}
