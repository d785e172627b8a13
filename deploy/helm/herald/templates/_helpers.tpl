{{- define "herald.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "herald.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "herald.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "herald.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "herald.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "herald.rulesConfigMap" -}}
{{- .Values.rules.existingConfigMap | default (printf "%s-rules" (include "herald.fullname" .)) -}}
{{- end -}}

{{/* The systemd unit's sandbox, translated (packaging/herald.service):
non-root, no privilege escalation, read-only root, no capabilities,
seccomp RuntimeDefault. */}}
{{- define "herald.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "herald.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The database and broker settings every herald container gets. */}}
{{- define "herald.env" -}}
- name: HERALD_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.database.secretName | quote }}, key: {{ .Values.database.urlKey | quote }}}
- name: HERALD_DATABASE_API_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.database.secretName | quote }}, key: {{ .Values.database.apiUrlKey | quote }}}
- name: HERALD_DATABASE_ADMIN_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.database.secretName | quote }}, key: {{ .Values.database.adminUrlKey | quote }}}
- name: HERALD_DATABASE_MAX_CONNS
  value: {{ .Values.database.maxConns | quote }}
- name: HERALD_DATABASE_API_MAX_CONNS
  value: {{ .Values.database.apiMaxConns | quote }}
{{- if .Values.amqp.urlsKey }}
- name: HERALD_AMQP_URLS
  valueFrom:
    secretKeyRef: {name: {{ .Values.amqp.secretName | quote }}, key: {{ .Values.amqp.urlsKey | quote }}}
- name: HERALD_AMQP_URL
  value: ""
{{- else }}
- name: HERALD_AMQP_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.amqp.secretName | quote }}, key: {{ .Values.amqp.urlKey | quote }}}
{{- end }}
- name: HERALD_AMQP_QUEUE_TYPE
  value: {{ .Values.amqp.queueType | quote }}
{{- if .Values.amqp.caSecretName }}
- name: HERALD_AMQP_TLS_CA_FILE
  value: /etc/herald/tls/amqp-ca.pem
{{- end }}
{{- end -}}
