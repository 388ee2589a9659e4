// Package helm holds Gantry's Helm chart (deploy/helm/gantry) and builds Helm
// itself from deploy/cluster's Go module into a versioned cache (build.sh). Its tests lint
// the chart and check what it renders; the e2e suite installs it into the
// local cluster and runs Gantry as its ServiceAccount.
package helm
