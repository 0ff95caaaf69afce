{{/* The name of every object: the release name, or "proxy-operator" in it. */}}
{{- define "proxy-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: the same as artifacts/deploy's, so the two installs match. */}}
{{- define "proxy-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "proxy-operator.fullname" . }}
{{- end -}}

{{- define "proxy-operator.labels" -}}
{{ include "proxy-operator.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "proxy-operator.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "proxy-operator.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* The gateway tier's selector labels. */}}
{{- define "proxy-operator.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "proxy-operator.fullname" . }}-gateway
{{- end -}}
