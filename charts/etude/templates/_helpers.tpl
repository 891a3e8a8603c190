{{/*
Names. Kubernetes object names and label values are limited to 63 characters (DNS-1123
labels), so every generated name is cut at 63 and a trailing "-" left by the cut removed.
Component names append "-<component>" to the full name; the full name is cut first to
leave room for the longest suffix ("-environment", 12 characters) and then the result is
cut again.
*/}}

{{/* The chart's name, or nameOverride. */}}
{{- define "etude.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name: fullnameOverride, else the release name when it already contains
the chart name, else "<release>-<chart>".
*/}}
{{- define "etude.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<fullname>-<component>", within 63 characters. Call with (dict "ctx" $ "component" "x"). */}}
{{- define "etude.componentName" -}}
{{- $base := include "etude.fullname" .ctx | trunc 50 | trimSuffix "-" }}
{{- printf "%s-%s" $base .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<chart>-<version>", a label value (no "+"). */}}
{{- define "etude.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels that select a component's pods. They never change over a release's life (a
Deployment's selector is immutable). Call with (dict "ctx" $ "component" "x").
*/}}
{{- define "etude.selectorLabels" -}}
app.kubernetes.io/name: {{ include "etude.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Every object's labels: the selector labels plus version and manager. */}}
{{- define "etude.labels" -}}
helm.sh/chart: {{ include "etude.chart" .ctx }}
{{ include "etude.selectorLabels" . }}
app.kubernetes.io/part-of: etude
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- end }}

{{/* Labels that select every pod of the release (NetworkPolicies). */}}
{{- define "etude.instanceLabels" -}}
app.kubernetes.io/name: {{ include "etude.name" . }}
app.kubernetes.io/instance: {{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The CPU image (Dockerfile at the repository root). */}}
{{- define "etude.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The GPU image (Dockerfile.gpu): trainer and inference. */}}
{{- define "etude.gpuImage" -}}
{{- printf "%s:%s" .Values.gpuImage.repository (default .Chart.AppVersion .Values.gpuImage.tag) }}
{{- end }}

{{/* The Redis URL services use: externalRedis.url, else the chart's StatefulSet. */}}
{{- define "etude.redisUrl" -}}
{{- if .Values.externalRedis.url }}
{{- .Values.externalRedis.url }}
{{- else }}
{{- printf "redis://%s:%d/0" (include "etude.componentName" (dict "ctx" . "component" "redis")) (int .Values.redis.port) }}
{{- end }}
{{- end }}

{{/* The URL as processes get it: with the chart's Redis, the password from the Secret
(`$(ETUDE_REDIS_PASSWORD)`, which Kubernetes expands from the variable before it). */}}
{{- define "etude.redisUrlWithPassword" -}}
{{- if .Values.externalRedis.url }}
{{- .Values.externalRedis.url }}
{{- else }}
{{- printf "redis://:$(ETUDE_REDIS_PASSWORD)@%s:%d/0" (include "etude.componentName" (dict "ctx" . "component" "redis")) (int .Values.redis.port) }}
{{- end }}
{{- end }}

{{/* "host:port" of Redis (KEDA's redis-streams scaler wants an address, not a URL). */}}
{{- define "etude.redisAddress" -}}
{{- $url := include "etude.redisUrl" . }}
{{- $hostport := regexReplaceAll "^rediss?://(?:[^@/]*@)?([^/?]+).*$" $url "${1}" }}
{{- if contains ":" $hostport }}{{ $hostport }}{{ else }}{{ $hostport }}:6379{{ end }}
{{- end }}

{{/* The database index in the Redis URL ("0" when it has none). */}}
{{- define "etude.redisDatabase" -}}
{{- $url := include "etude.redisUrl" . }}
{{- $db := regexFind "/[0-9]+$" $url | trimPrefix "/" }}
{{- default "0" $db }}
{{- end }}

{{/* The Redis stream rollouts are queued on. */}}
{{- define "etude.rolloutStream" -}}
{{- printf "etude:%s:rollouts" .Values.run.id }}
{{- end }}

{{/*
The components: every top-level block of the values with a `wiring` key (environment,
search, reward, rollout, gateway; values.yaml documents the keys). It is the one list of
them: their peers' addresses, NetworkPolicies, monitors, alerts, certificates, KEDA
scaling and the `helm test` pod's probes are generated from it, so adding a component is
its template file (which calls etude.component) and its values block. Every component
serves gRPC health and /metrics (etude.component gives it both ports), so each gets a
probe and a ServiceMonitor without a flag.

As JSON: name -> its wiring with every key filled in, plus `enabled`. Disabled
components are included: a NetworkPolicy names its callers whether they run or not.
Iterating it (`range` over a map) goes in alphabetical order.
*/}}
{{- define "etude.components" -}}
{{- $components := dict }}
{{- range $name, $values := .Values }}
{{- if and (kindIs "map" $values) (hasKey $values "wiring") }}
{{- $wiring := $values.wiring | default dict }}
{{- $_ := set $components $name (dict
  "enabled" $values.enabled
  "calls" ($wiring.calls | default list)
  "roles" ($wiring.roles | default list)
  "redis" ($wiring.redis | default false)
  "sharedTasks" ($wiring.sharedTasks | default false)
  "advertise" ($wiring.advertise | default false)
  "grpcLatencyAlert" ($wiring.grpcLatencyAlert | default false)) }}
{{- end }}
{{- end }}
{{- /* A misspelt peer or role would silently open nothing or mount a missing key. */}}
{{- $roles := splitList " " (include "etude.authRoles" .) }}
{{- range $name, $c := $components }}
{{- range $c.calls }}
{{- if not (or (hasKey $components .) (eq . "inference")) }}
{{- fail (printf "%s.wiring.calls: %q is not a component (a values block with `wiring`) nor \"inference\"" $name .) }}
{{- end }}
{{- end }}
{{- range $c.roles }}
{{- if not (has . $roles) }}
{{- fail (printf "%s.wiring.roles: %q is not a role (etude.authRoles)" $name .) }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $components }}
{{- end }}

{{/* "host:port" of a component's gRPC service. Call with (dict "ctx" $ "component" "x"). */}}
{{- define "etude.serviceAddress" -}}
{{- printf "%s:%d" (include "etude.componentName" .) (int .ctx.Values.global.grpcPort) }}
{{- end }}

{{/*
Environment every Étude process gets: gRPC bind address and ports, Redis, logging, and
where its peers are (only the enabled ones).
*/}}
{{- define "etude.commonEnv" -}}
- name: ETUDE_GRPC__HOST
  value: "0.0.0.0"
- name: ETUDE_GRPC__PORT
  value: {{ .Values.global.grpcPort | quote }}
- name: ETUDE_GRPC__METRICS_PORT
  value: {{ .Values.global.metricsPort | quote }}
{{- if not .Values.externalRedis.url }}
- name: ETUDE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "etude.authSecretName" . }}
      key: redis-password
{{- end }}
- name: ETUDE_REDIS__URL
  value: {{ include "etude.redisUrlWithPassword" . | quote }}
- name: ETUDE_STACK__RUN_DIR
  value: /data
- name: HOME
  value: /tmp
- name: ETUDE_LOG__LEVEL
  value: {{ .Values.global.logLevel | quote }}
- name: ETUDE_LOG__FORMAT
  value: {{ .Values.global.logFormat | quote }}
{{- range $component, $c := include "etude.components" . | fromJson }}
{{- if and $c.enabled $c.advertise }}
- name: ETUDE_SERVICES__{{ upper $component }}
  value: {{ include "etude.serviceAddress" (dict "ctx" $ "component" $component) | quote }}
{{- end }}
{{- end }}
{{- if .Values.trainer.enabled }}
- name: ETUDE_SERVICES__INFERENCE
  value: {{ include "etude.serviceAddress" (dict "ctx" $ "component" "inference") | quote }}
{{- end }}
{{- range .Values.global.extraEnv }}
- name: {{ .name }}
  value: {{ .value | quote }}
{{- end }}
{{- end }}

{{/* The gRPC health probe of a container (Kubernetes native grpc probes). */}}
{{- define "etude.grpcProbes" -}}
{{- /* The kubelet's gRPC probe speaks no TLS: with mTLS on, probes check the port. */}}
{{- $probe := ternary (dict "tcpSocket" (dict "port" .Values.global.grpcPort)) (dict "grpc" (dict "port" .Values.global.grpcPort)) .Values.tls.enabled }}
startupProbe:
  {{- toYaml $probe | nindent 2 }}
  periodSeconds: 5
  failureThreshold: 60
readinessProbe:
  {{- toYaml $probe | nindent 2 }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  {{- toYaml $probe | nindent 2 }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
{{- end }}

{{/*
Credentials (etude.common.auth). One Secret holds a token per role (`<role>`), its
SHA-256 (`<role>.sha256`) and the Redis password (`redis-password`): generated on the
first install and kept after (lookup), or the user's own (auth.existingSecret, same keys).
A pod mounts the digests of every role (what its server checks callers against) and the
tokens of its own roles only.
*/}}
{{- define "etude.authSecretName" -}}
{{- .Values.auth.existingSecret | default (include "etude.componentName" (dict "ctx" . "component" "auth")) }}
{{- end }}

{{/* Every role a token exists for. */}}
{{- define "etude.authRoles" -}}
rollout trainer gateway operator environment reward
{{- end }}

{{/* Env of a process presenting `roles`. Call with (dict "ctx" $ "roles" (list ...)). */}}
{{- define "etude.authEnv" -}}
- name: ETUDE_AUTH__TOKENS_DIR
  value: /etc/etude/credentials
- name: ETUDE_AUTH__ROLES
  value: {{ .roles | toJson | quote }}
- name: ETUDE_AUTH__METRICS_REQUIRE_TOKEN
  value: {{ .ctx.Values.auth.metricsRequireToken | quote }}
{{- if .ctx.Values.tls.enabled }}
- name: ETUDE_AUTH__TLS_CERT_FILE
  value: /etc/etude/tls/tls.crt
- name: ETUDE_AUTH__TLS_KEY_FILE
  value: /etc/etude/tls/tls.key
- name: ETUDE_AUTH__TLS_CA_FILE
  value: /etc/etude/tls/ca.crt
{{- end }}
{{- end }}

{{- define "etude.authVolumeMounts" -}}
- name: credentials
  mountPath: /etc/etude/credentials
  readOnly: true
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/etude/tls
  readOnly: true
{{- end }}
{{- end }}

{{/* The credentials volume of a pod whose processes present `roles`; with tls.enabled
also its cert-manager certificate. Call with (dict "ctx" $ "roles" (list ...) "component" "x"). */}}
{{- define "etude.authVolumes" -}}
- name: credentials
  secret:
    secretName: {{ include "etude.authSecretName" .ctx }}
    # Group-readable: the pod's fsGroup owns the files, other users of the node do not.
    defaultMode: {{ .mode | default 0440 }}
    items:
      {{- range $role := splitList " " (include "etude.authRoles" .ctx) }}
      - key: {{ $role }}.sha256
        path: {{ $role }}.sha256
      {{- end }}
      {{- range $role := .roles }}
      - key: {{ $role }}
        path: {{ $role }}
      {{- end }}
{{- if .ctx.Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ include "etude.componentName" (dict "ctx" .ctx "component" (printf "%s-tls" .component)) }}
    defaultMode: {{ .mode | default 0440 }}
{{- end }}
{{- end }}
