{{/* The release's name for Gantry's objects: "gantry" for a release named gantry, else <release>-gantry. */}}
{{- define "gantry.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gantry.labels" -}}
app.kubernetes.io/name: gantry
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gantry.selector" -}}
app.kubernetes.io/name: gantry
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "gantry.agentSelector" -}}
app.kubernetes.io/name: gantry
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* An image reference: repository@digest when a digest is given, else repository:tag (default the chart's appVersion). */}}
{{- define "gantry.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security profile's container settings. */}}
{{- define "gantry.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Checks that hold across values (values.schema.json checks each value). */}}
{{- define "gantry.validate" -}}
{{- if and (eq .Values.database.driver "sqlite") (gt (int .Values.replicas) 1) -}}
{{- fail (printf "database.driver: sqlite serves one replica; replicas is %d: use PostgreSQL (database.driver: postgres) or replicas: 1" (int .Values.replicas)) -}}
{{- end -}}
{{- if and (eq .Values.database.driver "postgres") (not .Values.database.existingSecret) -}}
{{- fail "database.existingSecret: name the Secret that holds the PostgreSQL URL (key database.secretKey, default dsn)" -}}
{{- end -}}
{{- if not .Values.oidc.issuer -}}
{{- fail "oidc.issuer: Gantry serves beyond loopback only with an OpenID provider; set oidc.issuer and oidc.clientID" -}}
{{- end -}}
{{- if not .Values.oidc.clientID -}}
{{- fail "oidc.clientID: the portal's OpenID client id is required with oidc.issuer" -}}
{{- end -}}
{{- if not .Values.publicURL -}}
{{- fail "publicURL: how browsers reach Gantry (https://gantry.example.com); sign-in redirects come back to it" -}}
{{- end -}}
{{- if and .Values.ingress.trustedProxies (or (not .Values.networkPolicy.enabled) (not .Values.networkPolicy.from)) -}}
{{- fail "ingress.trustedProxies: Gantry believes X-Forwarded-For from these addresses, so only the proxies may reach its port: set networkPolicy.enabled and networkPolicy.from to the Ingress controller's pods (a pod in the trusted range could otherwise name any client)" -}}
{{- end -}}
{{- range $what := list "templates" "policy" "images" -}}
{{- $c := index $.Values.catalog $what -}}
{{- if and (not $.Values.catalog.gitSync.enabled) (not $c.configMap) (not $c.files) -}}
{{- fail (printf "catalog.%s: give configMap (an existing ConfigMap: kubectl create configmap --from-file=%s/), files, or catalog.gitSync" $what $what) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding Gantry's serving certificate. */}}
{{- define "gantry.tlsSecret" -}}
{{- default (printf "%s-tls" (include "gantry.fullname" .)) .Values.tls.secretName -}}
{{- end }}
