{{/* The name of every object: the release name, or "proxy-operator" in it. */}}
{{- define "proxy-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
Labels follow Helm's convention: app.kubernetes.io/name is the chart's name
and app.kubernetes.io/instance the release's; app.kubernetes.io/component
tells the operator from the gateway tier. The kubernetes provider's
NetworkPolicies admit both by app.kubernetes.io/name=proxy-operator in the
release's namespace, which holds for any release name and for artifacts/'s
kustomize base (docs/decisions/0283-helm-labels-name-the-chart.md).
*/}}
{{- define "proxy-operator.instanceLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The operator's selector labels: the same as artifacts/deploy's for the release proxy-operator. */}}
{{- define "proxy-operator.selectorLabels" -}}
{{ include "proxy-operator.instanceLabels" . }}
app.kubernetes.io/component: operator
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
{{ include "proxy-operator.instanceLabels" . }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "proxy-operator.gatewayLabels" -}}
{{ include "proxy-operator.gatewaySelectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ include "proxy-operator.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The namespace of the inspection CA keys (docs/inspection.md): one of their
own, so that the gateway, which reads them, reads no other Secret of the
release (the lease-ID signing key, cloud tokens).
*/}}
{{- define "proxy-operator.inspectionCANamespace" -}}
{{- .Values.inspection.caNamespace | default (printf "%s-inspection-ca" .Release.Namespace | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/*
The lease store's replication (values leaseReplication): "true" with mode
raft, else "". The replicas find each other by replicaSelector, the
operator's own selector labels as a label selector (--replica-selector).
*/}}
{{- define "proxy-operator.raft" -}}
{{- if not (has .Values.leaseReplication.mode (list "raft" "none")) -}}
{{- fail (printf "leaseReplication.mode: %q is not raft or none" .Values.leaseReplication.mode) -}}
{{- end -}}
{{- if eq .Values.leaseReplication.mode "raft" -}}true{{- end -}}
{{- end -}}

{{- define "proxy-operator.replicaSelector" -}}
{{- $labels := include "proxy-operator.selectorLabels" . | fromYaml -}}
{{- $terms := list -}}
{{- range $k := keys $labels | sortAlpha -}}
{{- $terms = append $terms (printf "%s=%s" $k (get $labels $k)) -}}
{{- end -}}
{{- join "," $terms -}}
{{- end -}}

{{/* A quorum of the replicas: the fewest that keep the Raft group deciding. */}}
{{- define "proxy-operator.quorum" -}}
{{- add (div (int .Values.replicaCount) 2) 1 -}}
{{- end -}}
