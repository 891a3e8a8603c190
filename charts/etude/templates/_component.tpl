{{/*
A CPU service: Deployment, headless Service for gRPC (clients resolve every pod and
balance across them), and a PodDisruptionBudget. Each component's own file defines
"etude.<name>.env" (extra environment variables) and "etude.<name>.securityContext", and
calls this with (dict "ctx" $ "component" "<name>") when <name>.enabled.

Adding a component: that file, plus its values block with a `wiring` key (values.yaml,
and the block in values.schema.json). The block makes it a component (etude.components),
which gives it its NetworkPolicy, its ServiceMonitor, its certificate and its probe in
the `helm test` pod; its `wiring` says whom it calls and what it mounts. A `keda.<name>`
block scales it with KEDA; the Deployment then leaves `replicas` out.
*/}}
{{- define "etude.component" -}}
{{- $ctx := .ctx }}
{{- $component := .component }}
{{- $values := index $ctx.Values $component }}
{{- $name := include "etude.componentName" . }}
{{- $keda := and $ctx.Values.keda.enabled (hasKey $ctx.Values.keda $component) (index $ctx.Values.keda $component).enabled }}
{{- $wiring := index (include "etude.components" $ctx | fromJson) $component }}
{{- $roles := $wiring.roles }}
{{- $sharedTasks := and $ctx.Values.sharedTasks.enabled $wiring.sharedTasks }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "etude.labels" . | nindent 4 }}
spec:
  {{- if not $keda }}
  replicas: {{ $values.replicas }}
  {{- end }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- include "etude.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "etude.labels" . | nindent 8 }}
      {{- with $values.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      {{- with $ctx.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      enableServiceLinks: false
      securityContext:
        # Owns the mounted credentials (mode 0440), so the service's uid can read them.
        fsGroup: 10001
      {{- if $values.terminationGracePeriodSeconds }}
      terminationGracePeriodSeconds: {{ $values.terminationGracePeriodSeconds }}
      {{- end }}
      {{- if and (hasKey $values "runtimeClassName") $values.runtimeClassName }}
      runtimeClassName: {{ $values.runtimeClassName }}
      {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ $component }}
          image: {{ include "etude.image" $ctx }}
          imagePullPolicy: {{ $ctx.Values.image.pullPolicy }}
          command: ["python", "-m", "etude.{{ $component }}"]
          ports:
            - name: grpc
              containerPort: {{ $ctx.Values.global.grpcPort }}
              protocol: TCP
            - name: metrics
              containerPort: {{ $ctx.Values.global.metricsPort }}
              protocol: TCP
            {{- if eq $component "gateway" }}
            - name: http
              containerPort: {{ $values.httpPort }}
              protocol: TCP
            {{- end }}
          env:
            {{- include "etude.commonEnv" $ctx | nindent 12 }}
            {{- include "etude.authEnv" (dict "ctx" $ctx "roles" $roles) | nindent 12 }}
            {{- include (printf "etude.%s.env" $component) $ctx | nindent 12 }}
            {{- range $values.extraEnv }}
            - name: {{ .name }}
              value: {{ .value | quote }}
            {{- end }}
          {{- include "etude.grpcProbes" $ctx | nindent 10 }}
          {{- with $values.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- include (printf "etude.%s.securityContext" $component) $ctx | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: /data
            - name: tmp
              mountPath: /tmp
            {{- include "etude.authVolumeMounts" $ctx | nindent 12 }}
            {{- if $sharedTasks }}
            - name: tasks
              mountPath: /shared/tasks
            {{- end }}
      volumes:
        - name: data
          emptyDir:
            {{- with $values.dataSizeLimit }}
            sizeLimit: {{ . }}
            {{- end }}
        - name: tmp
          emptyDir: {}
        {{- include "etude.authVolumes" (dict "ctx" $ctx "roles" $roles "component" $component) | nindent 8 }}
        {{- if $sharedTasks }}
        - name: tasks
          persistentVolumeClaim:
            claimName: {{ $ctx.Values.sharedTasks.existingClaim | default (include "etude.componentName" (dict "ctx" $ctx "component" "tasks")) }}
        {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "etude.labels" . | nindent 4 }}
spec:
  {{- if ne $component "gateway" }}
  # Headless: DNS returns every ready pod, so gRPC clients spread calls over them
  # instead of pinning one long-lived connection to one pod behind a virtual IP.
  clusterIP: None
  {{- end }}
  selector:
    {{- include "etude.selectorLabels" . | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $ctx.Values.global.grpcPort }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    - name: metrics
      port: {{ $ctx.Values.global.metricsPort }}
      targetPort: metrics
      protocol: TCP
    {{- if eq $component "gateway" }}
    - name: http
      port: {{ $values.httpPort }}
      targetPort: http
      protocol: TCP
      appProtocol: http
    {{- end }}
{{- if $values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $ctx.Release.Namespace }}
  labels:
    {{- include "etude.labels" . | nindent 4 }}
spec:
  maxUnavailable: {{ $values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "etude.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end }}

{{/* The default container security context; components may override theirs. */}}
{{- define "etude.defaultSecurityContext" -}}
allowPrivilegeEscalation: false
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
capabilities:
  drop: ["ALL"]
{{- end }}

{{/*
The container security context of a pod that runs bubblewrap sandboxes (the environment's
sessions, the reward's grading). bubblewrap creates user, mount and network namespaces
without privileges; container runtimes' default seccomp profiles refuse
unshare(CLONE_NEWUSER), hence the profile is a value (Unconfined by default; pair it with
runtimeClassName for a VM boundary).
*/}}
{{- define "etude.sandboxSecurityContext" -}}
{{ include "etude.defaultSecurityContext" . }}
{{- with .Values.environment.sandbox }}
seccompProfile:
  type: {{ .seccompProfile }}
  {{- if eq .seccompProfile "Localhost" }}
  localhostProfile: {{ required "environment.sandbox.seccompLocalhostProfile: the Localhost profile's path, relative to the kubelet's seccomp directory" .seccompLocalhostProfile | quote }}
  {{- end }}
{{- end }}
{{- end }}
