{{/* Names: <release>-<chart> unless the release already names the chart, cut to Kubernetes' 63 characters. */}}
{{- define "tvg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "tvg.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A StatefulSet pod's name adds "-<ordinal>" to it: leave room for that. */}}
{{- define "tvg.gatewayName" -}}{{ include "tvg.fullname" . | trunc 55 | trimSuffix "-" }}-gateway{{- end -}}
{{- define "tvg.tritonName" -}}{{ include "tvg.fullname" . | trunc 50 | trimSuffix "-" }}-triton{{- end -}}

{{- define "tvg.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tvg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "tvg.gatewaySelector" -}}
app.kubernetes.io/name: {{ include "tvg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "tvg.tritonSelector" -}}
app.kubernetes.io/name: {{ include "tvg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: triton
{{- end -}}

{{/* The headless Service's DNS name: it resolves to every ready Triton pod. */}}
{{- define "tvg.tritonHost" -}}
{{ include "tvg.tritonName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.clusterDomain }}
{{- end -}}

{{/* GATEWAY_TRITON_GRPC_URLS: comma-separated; dns:/// entries are re-resolved by the gateway every
GATEWAY_DNS_REFRESH_S, one replica per address, each scraped on GATEWAY_TRITON_METRICS_PORT. */}}
{{- define "tvg.tritonGrpcUrls" -}}
{{- if .Values.gateway.tritonGrpcUrls -}}
{{- join "," .Values.gateway.tritonGrpcUrls -}}
{{- else if .Values.triton.enabled -}}
dns:///{{ include "tvg.tritonHost" . }}:{{ .Values.triton.ports.grpc }}
{{- else -}}
{{- fail "triton.enabled is false: set gateway.tritonGrpcUrls to the Triton replicas" -}}
{{- end -}}
{{- end -}}

{{/* Grace periods: given, or computed; a given one that cannot cover the hook and the drain is refused. */}}
{{- define "tvg.gatewayGrace" -}}
{{- $g := .Values.gateway -}}
{{- $floor := add (int $g.preStopSleepSeconds) (int (ceil $g.drainTimeoutSeconds)) -}}
{{- if $g.terminationGracePeriodSeconds -}}
{{- if le (int $g.terminationGracePeriodSeconds) (int $floor) -}}
{{- fail (printf "gateway.terminationGracePeriodSeconds (%v) must exceed preStopSleepSeconds + drainTimeoutSeconds (%d)" $g.terminationGracePeriodSeconds $floor) -}}
{{- end -}}
{{- $g.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $floor (int $g.shutdownSeconds) -}}
{{- end -}}
{{- end -}}

{{- define "tvg.tritonGrace" -}}
{{- $t := .Values.triton -}}
{{- $floor := add (int $t.preStopSleepSeconds) (int $t.exitTimeoutSeconds) -}}
{{- if $t.terminationGracePeriodSeconds -}}
{{- if le (int $t.terminationGracePeriodSeconds) (int $floor) -}}
{{- fail (printf "triton.terminationGracePeriodSeconds (%v) must exceed preStopSleepSeconds + exitTimeoutSeconds (%d)" $t.terminationGracePeriodSeconds $floor) -}}
{{- end -}}
{{- $t.terminationGracePeriodSeconds -}}
{{- else -}}
{{- add $floor (int $t.shutdownSeconds) -}}
{{- end -}}
{{- end -}}

{{/* ConfigMap keys cannot hold "/": <model>/<path> becomes <model>.<path with "/" as "__">. */}}
{{- define "tvg.modelKey" -}}
{{- printf "%s.%s" .model (.path | replace "/" "__") -}}
{{- end -}}

{{/* The configMap model repository as {model: {path: content}}: the values', or the bundled model_repository/. */}}
{{- define "tvg.models" -}}
{{- if .Values.modelRepository.configMap.models -}}
{{- toJson .Values.modelRepository.configMap.models -}}
{{- else -}}
{{- $models := dict -}}
{{- range $file, $_ := .Files.Glob "files/model_repository/**" -}}
{{- $rel := trimPrefix "files/model_repository/" $file -}}
{{- $parts := splitList "/" $rel -}}
{{- $model := first $parts -}}
{{- $files := get $models $model | default dict -}}
{{- $_ := set $files (join "/" (rest $parts)) ($.Files.Get $file) -}}
{{- $_ := set $models $model $files -}}
{{- end -}}
{{- toJson $models -}}
{{- end -}}
{{- end -}}
