{{/*
Names, labels and the settings every runstore container shares. The checks
(`runstore.validate`) run first in every template that renders a workload, so
a values mistake fails `helm install` and `helm template` before anything is
applied: fail closed, as the server itself does.
*/}}

{{- define "runstore.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resources' base name; "-migrate" and "-headless" are added to it. */}}
{{- define "runstore.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else if contains (include "runstore.name" .) .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "runstore.name" .) | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The migration Job's name: constant across upgrades, so each upgrade's Job
replaces the last one (helm.sh/hook-delete-policy: before-hook-creation). */}}
{{- define "runstore.migrateName" -}}
{{- printf "%s-migrate" (include "runstore.fullname" .) }}
{{- end }}

{{- define "runstore.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runstore.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "runstore.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "runstore.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "runstore.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "runstore.sqlite" -}}
{{- if eq .Values.database.mode "sqlite" }}true{{ end }}
{{- end }}

{{- define "runstore.mtls" -}}
{{- if and .Values.tls.enabled .Values.tls.clientCA.enabled }}true{{ end }}
{{- end }}

{{/*
Every rule the values must follow that the schema cannot say. Each message
names the value to set.
*/}}
{{- define "runstore.validate" -}}
{{- if not .Values.image.repository }}
{{- fail "image.repository is empty: the registry path of the runstore image (built from deploy/image/Containerfile, docs/deploy.md#the-image)" }}
{{- end }}
{{- if include "runstore.sqlite" . }}
{{- if gt (int .Values.replicas) 1 }}
{{- fail (printf "replicas is %d, but database.mode sqlite serves from one replica only (SQLite has one writer, on one volume): set replicas: 1, or use database.mode postgresql" (int .Values.replicas)) }}
{{- end }}
{{- else }}
{{- if not .Values.database.existingSecret }}
{{- fail "database.existingSecret is empty: database.mode postgresql needs the name of an existing Secret holding the PostgreSQL URL (key database.existingSecretKey). The migration Job runs before this chart creates anything, so the Secret must exist before helm install" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.database.to) }}
{{- fail "networkPolicy.database.to is empty: say where PostgreSQL is (ipBlock, or namespaceSelector/podSelector peers), or the policy leaves the server no way to its database; or set networkPolicy.enabled: false" }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled is true but tls.existingSecret is empty: the name of a kubernetes.io/tls Secret (tls.crt, tls.key, and the CA at tls.caKey)" }}
{{- end }}
{{- if and .Values.tls.clientCA.enabled (not .Values.tls.enabled) }}
{{- fail "tls.clientCA.enabled (mTLS) needs tls.enabled: the server asks for client certificates only over TLS" }}
{{- end }}
{{- if and (include "runstore.mtls" .) (not .Values.tls.probeClientSecret) }}
{{- fail "tls.clientCA.enabled (mTLS) needs tls.probeClientSecret: a kubernetes.io/tls Secret with a client certificate signed by the client CA, which the probes' runstore health presents (never the server's own certificate)" }}
{{- end }}
{{- if not (or .Values.insecure (and .Values.tls.enabled .Values.auth.existingSecret)) }}
{{- fail "runstore refuses to serve a pod address without TLS and an auth file: set tls.enabled with tls.existingSecret, and auth.existingSecret (docs/security.md); or insecure: true on a network that is yours alone" }}
{{- end }}
{{- range $name, $value := .Values.settings }}
{{- if has $name (list "listen" "database_url" "database_url_file" "read_database_url" "migrate" "tls_cert" "tls_key" "tls_client_ca" "auth_file" "insecure" "metrics_listen") }}
{{- fail (printf "settings.%s is set by the chart itself (from its own values: database, tls, auth, insecure, metrics); remove it from settings" $name) }}
{{- end }}
{{- end }}
{{- end }}

{{/* The gRPC address the probes call: this pod's own server on loopback. */}}
{{- define "runstore.probeTarget" -}}
{{- printf "%s:%d" (default "127.0.0.1" .Values.tls.probeServerName) (int .Values.grpcPort) }}
{{- end }}

{{/* `runstore health` against the pod's own server, with the TLS flags it needs
(never from RUNSTORE_TLS_* variables: the chart sets none). */}}
{{- define "runstore.healthArgs" -}}
- --target
- {{ include "runstore.probeTarget" . }}
- --timeout
- {{ printf "%ds" (int (sub (int .Values.probes.timeoutSeconds) 1)) }}
{{- if .Values.tls.enabled }}
- --tls-ca
- /etc/runstore/tls/{{ .Values.tls.caKey }}
{{- end }}
{{- if include "runstore.mtls" . }}
- --tls-cert
- /etc/runstore/probe-tls/tls.crt
- --tls-key
- /etc/runstore/probe-tls/tls.key
{{- end }}
{{- end }}

{{/*
Liveness: the server answers a health check at all, SERVING or NOT_SERVING.
Every health status follows the database (server/runstore/server/health.py),
so a plain `runstore health` would restart every replica when the database
stalls; `--json` prints the status on stdout only when the server answered
(a refused or hung call prints to stderr), which is what grep looks for.
*/}}
{{- define "runstore.livenessProbe" -}}
exec:
  command:
    - /bin/sh
    - -c
    - 'runstore health --json "$@" | grep -q "\"status\": \""'
    - runstore-liveness
    {{- include "runstore.healthArgs" . | nindent 4 }}
{{- end }}

{{/* Readiness: the health status itself, SERVING only while the database answers. */}}
{{- define "runstore.readinessProbe" -}}
exec:
  command:
    - runstore
    - health
    {{- include "runstore.healthArgs" . | nindent 4 }}
{{- end }}

{{- define "runstore.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "runstore.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The database URL as a file (its password in neither argv nor the environment). */}}
{{- define "runstore.databaseVolume" -}}
- name: database-url
  secret:
    secretName: {{ .Values.database.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.database.existingSecretKey }}
        path: database-url
{{- end }}

{{- define "runstore.databaseVolumeMount" -}}
- name: database-url
  mountPath: /etc/runstore/database
  readOnly: true
{{- end }}

{{- define "runstore.tmpVolume" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- end }}

{{- define "runstore.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}


{{/* The pod fields the server's Deployment and StatefulSet share. */}}
{{- define "runstore.podSpec" -}}
automountServiceAccountToken: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
enableServiceLinks: false
securityContext:
  {{- include "runstore.podSecurityContext" . | nindent 2 }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .Values.tls.probeServerName }}
# The probes connect by a name the server's certificate holds, to this pod itself.
hostAliases:
  - ip: 127.0.0.1
    hostnames:
      - {{ .Values.tls.probeServerName }}
{{- end }}
containers:
  - name: runstore
    image: {{ include "runstore.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["runstore"]
    args:
      - serve
      {{- if .Values.tls.enabled }}
      - --tls-cert
      - /etc/runstore/tls/tls.crt
      - --tls-key
      - /etc/runstore/tls/tls.key
      {{- end }}
      {{- if include "runstore.mtls" . }}
      - --tls-client-ca
      - /etc/runstore/client-ca/{{ .Values.tls.clientCA.key }}
      {{- end }}
    env:
      - name: RUNSTORE_LISTEN
        value: {{ printf "0.0.0.0:%d" (int .Values.grpcPort) | quote }}
      {{- if include "runstore.sqlite" . }}
      - name: RUNSTORE_DATABASE_URL
        value: sqlite:////data/runstore.db
      # One replica: it upgrades the schema itself before serving.
      - name: RUNSTORE_MIGRATE
        value: "true"
      {{- else }}
      - name: RUNSTORE_DATABASE_URL_FILE
        value: /etc/runstore/database/database-url
      {{- end }}
      {{- if .Values.auth.existingSecret }}
      - name: RUNSTORE_AUTH_FILE
        value: /etc/runstore/auth/auth.toml
      {{- end }}
      {{- if .Values.insecure }}
      - name: RUNSTORE_INSECURE
        value: "true"
      {{- end }}
      {{- if .Values.metrics.enabled }}
      - name: RUNSTORE_METRICS_LISTEN
        value: {{ printf "0.0.0.0:%d" (int .Values.metrics.port) | quote }}
      {{- end }}
      {{- range $name, $value := .Values.settings }}
      - name: {{ printf "RUNSTORE_%s" (upper $name) }}
        value: {{ $value | toString | quote }}
      {{- end }}
    ports:
      - name: grpc
        containerPort: {{ .Values.grpcPort }}
        protocol: TCP
      {{- if .Values.metrics.enabled }}
      - name: metrics
        containerPort: {{ .Values.metrics.port }}
        protocol: TCP
      {{- end }}
    startupProbe:
      {{- include "runstore.livenessProbe" . | nindent 6 }}
      periodSeconds: {{ .Values.probes.startup.periodSeconds }}
      timeoutSeconds: {{ .Values.probes.timeoutSeconds }}
      failureThreshold: {{ .Values.probes.startup.failureThreshold }}
    livenessProbe:
      {{- include "runstore.livenessProbe" . | nindent 6 }}
      periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
      timeoutSeconds: {{ .Values.probes.timeoutSeconds }}
      failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
    readinessProbe:
      {{- include "runstore.readinessProbe" . | nindent 6 }}
      periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
      timeoutSeconds: {{ .Values.probes.timeoutSeconds }}
      failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
      successThreshold: 1
    {{- if gt (int .Values.preStopSleepSeconds) 0 }}
    # Kubernetes takes the pod out of the Service's endpoints while it sleeps;
    # then SIGTERM, and calls in flight get the server's grace period.
    lifecycle:
      preStop:
        sleep:
          seconds: {{ .Values.preStopSleepSeconds }}
    {{- end }}
    resources:
      {{- toYaml .Values.resources | nindent 6 }}
    securityContext:
      {{- include "runstore.containerSecurityContext" . | nindent 6 }}
    volumeMounts:
      {{- include "runstore.tmpVolumeMount" . | nindent 6 }}
      {{- if include "runstore.sqlite" . }}
      - name: data
        mountPath: /data
      {{- else }}
      {{- include "runstore.databaseVolumeMount" . | nindent 6 }}
      {{- end }}
      {{- if .Values.tls.enabled }}
      - name: tls
        mountPath: /etc/runstore/tls
        readOnly: true
      {{- end }}
      {{- if include "runstore.mtls" . }}
      - name: client-ca
        mountPath: /etc/runstore/client-ca
        readOnly: true
      - name: probe-tls
        mountPath: /etc/runstore/probe-tls
        readOnly: true
      {{- end }}
      {{- if .Values.auth.existingSecret }}
      - name: auth
        mountPath: /etc/runstore/auth
        readOnly: true
      {{- end }}
volumes:
  {{- include "runstore.tmpVolume" . | nindent 2 }}
  {{- if not (include "runstore.sqlite" .) }}
  {{- include "runstore.databaseVolume" . | nindent 2 }}
  {{- end }}
  {{- if .Values.tls.enabled }}
  # Whole Secrets, not subPath: a renewed certificate appears in the files,
  # and SIGHUP (or a rollout) makes the server read it.
  - name: tls
    secret:
      secretName: {{ .Values.tls.existingSecret }}
      defaultMode: 0440
  {{- end }}
  {{- if include "runstore.mtls" . }}
  - name: client-ca
    secret:
      secretName: {{ default .Values.tls.existingSecret .Values.tls.clientCA.existingSecret }}
      defaultMode: 0440
      items:
        - key: {{ .Values.tls.clientCA.key }}
          path: {{ .Values.tls.clientCA.key }}
  - name: probe-tls
    secret:
      secretName: {{ .Values.tls.probeClientSecret }}
      defaultMode: 0440
      items:
        - key: tls.crt
          path: tls.crt
        - key: tls.key
          path: tls.key
  {{- end }}
  {{- if .Values.auth.existingSecret }}
  - name: auth
    secret:
      secretName: {{ .Values.auth.existingSecret }}
      defaultMode: 0440
      items:
        - key: {{ .Values.auth.key }}
          path: auth.toml
  {{- end }}
{{- end }}

{{/* Egress every runstore pod needs: DNS (UDP and TCP 53 to kube-dns) and, in
PostgreSQL mode, the database; then whatever the operator adds. */}}
{{- define "runstore.egressRules" -}}
- to:
    - namespaceSelector:
        {{- toYaml .Values.networkPolicy.dns.namespaceSelector | nindent 8 }}
      podSelector:
        {{- toYaml .Values.networkPolicy.dns.podSelector | nindent 8 }}
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- if not (include "runstore.sqlite" .) }}
- to:
    {{- toYaml .Values.networkPolicy.database.to | nindent 4 }}
  ports:
    - protocol: TCP
      port: {{ .Values.networkPolicy.database.port }}
{{- end }}
{{- with .Values.networkPolicy.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end }}
