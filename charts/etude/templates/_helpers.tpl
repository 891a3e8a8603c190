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
- name: ETUDE_REDIS__URL
  value: {{ include "etude.redisUrl" . | quote }}
- name: ETUDE_STACK__RUN_DIR
  value: /data
- name: HOME
  value: /tmp
- name: ETUDE_LOG__LEVEL
  value: {{ .Values.global.logLevel | quote }}
- name: ETUDE_LOG__FORMAT
  value: {{ .Values.global.logFormat | quote }}
{{- range $component := list "environment" "search" "reward" }}
{{- if (index $.Values $component).enabled }}
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
startupProbe:
  grpc:
    port: {{ .Values.global.grpcPort }}
  periodSeconds: 5
  failureThreshold: 60
readinessProbe:
  grpc:
    port: {{ .Values.global.grpcPort }}
  periodSeconds: 5
  failureThreshold: 2
livenessProbe:
  grpc:
    port: {{ .Values.global.grpcPort }}
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 6
{{- end }}
