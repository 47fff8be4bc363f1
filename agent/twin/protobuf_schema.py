"""Field numbers of the Kubernetes protobuf messages the twin decodes (upstream v1.32).

One entry per message reachable from the built-in kinds the twin serves (Namespace, Node, Pod,
Service, Event, ConfigMap, Secret, ServiceAccount, Lease, Deployment, ReplicaSet, Job,
NetworkPolicy, the four RBAC kinds), the autoscaling/v1 Scale subresource and DeleteOptions, as
written in the `generated.proto` files of k8s.io/api and k8s.io/apimachinery (release 1.32). Each
entry lists `number jsonName type`: `s` string, `i` int32/int64, `b` bool, `y` bytes, `T` Time,
`U` MicroTime, `Q` resource.Quantity, `I` IntOrString, `F` FieldsV1, another entry's name
for a nested message; a leading `*` marks a repeated field and
`{t}` a map from string to `t`. The field names are the JSON names.

Read by protobuf.py. Data only.
"""

from __future__ import annotations

SCHEMA: dict[str, str] = {
    "apps.v1.Deployment": (
        "1 metadata meta.v1.ObjectMeta, 2 spec apps.v1.DeploymentSpec, "
        "3 status apps.v1.DeploymentStatus"
    ),
    "apps.v1.DeploymentCondition": (
        "1 type s, 2 status s, 4 reason s, 5 message s, 6 lastUpdateTime T, 7 lastTransitionTime T"
    ),
    "apps.v1.DeploymentSpec": (
        "1 replicas i, 2 selector meta.v1.LabelSelector, 3 template core.v1.PodTemplateSpec, "
        "4 strategy apps.v1.DeploymentStrategy, 5 minReadySeconds i, 6 revisionHistoryLimit i, "
        "7 paused b, 9 progressDeadlineSeconds i"
    ),
    "apps.v1.DeploymentStatus": (
        "1 observedGeneration i, 2 replicas i, 3 updatedReplicas i, 4 availableReplicas i, "
        "5 unavailableReplicas i, 6 conditions *apps.v1.DeploymentCondition, 7 readyReplicas i, "
        "8 collisionCount i"
    ),
    "apps.v1.DeploymentStrategy": "1 type s, 2 rollingUpdate apps.v1.RollingUpdateDeployment",
    "apps.v1.ReplicaSet": (
        "1 metadata meta.v1.ObjectMeta, 2 spec apps.v1.ReplicaSetSpec, "
        "3 status apps.v1.ReplicaSetStatus"
    ),
    "apps.v1.ReplicaSetCondition": (
        "1 type s, 2 status s, 3 lastTransitionTime T, 4 reason s, 5 message s"
    ),
    "apps.v1.ReplicaSetSpec": (
        "1 replicas i, 2 selector meta.v1.LabelSelector, 3 template core.v1.PodTemplateSpec, "
        "4 minReadySeconds i"
    ),
    "apps.v1.ReplicaSetStatus": (
        "1 replicas i, 2 fullyLabeledReplicas i, 3 observedGeneration i, 4 readyReplicas i, "
        "5 availableReplicas i, 6 conditions *apps.v1.ReplicaSetCondition"
    ),
    "apps.v1.RollingUpdateDeployment": "1 maxUnavailable I, 2 maxSurge I",
    "autoscaling.v1.Scale": (
        "1 metadata meta.v1.ObjectMeta, 2 spec autoscaling.v1.ScaleSpec, "
        "3 status autoscaling.v1.ScaleStatus"
    ),
    "autoscaling.v1.ScaleSpec": "1 replicas i",
    "autoscaling.v1.ScaleStatus": "1 replicas i, 2 selector s",
    "batch.v1.Job": (
        "1 metadata meta.v1.ObjectMeta, 2 spec batch.v1.JobSpec, 3 status batch.v1.JobStatus"
    ),
    "batch.v1.JobCondition": (
        "1 type s, 2 status s, 3 lastProbeTime T, 4 lastTransitionTime T, 5 reason s, 6 message s"
    ),
    "batch.v1.JobSpec": (
        "1 parallelism i, 2 completions i, 3 activeDeadlineSeconds i, "
        "4 selector meta.v1.LabelSelector, 5 manualSelector b, "
        "6 template core.v1.PodTemplateSpec, 7 backoffLimit i, 8 ttlSecondsAfterFinished i, "
        "9 completionMode s, 10 suspend b, 11 podFailurePolicy batch.v1.PodFailurePolicy, "
        "12 backoffLimitPerIndex i, 13 maxFailedIndexes i, 14 podReplacementPolicy s, "
        "15 managedBy s, 16 successPolicy batch.v1.SuccessPolicy"
    ),
    "batch.v1.JobStatus": (
        "1 conditions *batch.v1.JobCondition, 2 startTime T, 3 completionTime T, 4 active i, "
        "5 succeeded i, 6 failed i, 7 completedIndexes s, "
        "8 uncountedTerminatedPods batch.v1.UncountedTerminatedPods, 9 ready i, "
        "10 failedIndexes s, 11 terminating i"
    ),
    "batch.v1.PodFailurePolicy": "1 rules *batch.v1.PodFailurePolicyRule",
    "batch.v1.PodFailurePolicyOnExitCodesRequirement": (
        "1 containerName s, 2 operator s, 3 values *i"
    ),
    "batch.v1.PodFailurePolicyOnPodConditionsPattern": "1 type s, 2 status s",
    "batch.v1.PodFailurePolicyRule": (
        "1 action s, 2 onExitCodes batch.v1.PodFailurePolicyOnExitCodesRequirement, "
        "3 onPodConditions *batch.v1.PodFailurePolicyOnPodConditionsPattern"
    ),
    "batch.v1.SuccessPolicy": "1 rules *batch.v1.SuccessPolicyRule",
    "batch.v1.SuccessPolicyRule": "1 succeededIndexes s, 2 succeededCount i",
    "batch.v1.UncountedTerminatedPods": "1 succeeded *s, 2 failed *s",
    "coordination.v1.Lease": "1 metadata meta.v1.ObjectMeta, 2 spec coordination.v1.LeaseSpec",
    "coordination.v1.LeaseSpec": (
        "1 holderIdentity s, 2 leaseDurationSeconds i, 3 acquireTime U, 4 renewTime U, "
        "5 leaseTransitions i, 6 strategy s, 7 preferredHolder s"
    ),
    "core.v1.AWSElasticBlockStoreVolumeSource": (
        "1 volumeID s, 2 fsType s, 3 partition i, 4 readOnly b"
    ),
    "core.v1.Affinity": (
        "1 nodeAffinity core.v1.NodeAffinity, 2 podAffinity core.v1.PodAffinity, "
        "3 podAntiAffinity core.v1.PodAntiAffinity"
    ),
    "core.v1.AppArmorProfile": "1 type s, 2 localhostProfile s",
    "core.v1.AttachedVolume": "1 name s, 2 devicePath s",
    "core.v1.AzureDiskVolumeSource": (
        "1 diskName s, 2 diskURI s, 3 cachingMode s, 4 fsType s, 5 readOnly b, 6 kind s"
    ),
    "core.v1.AzureFileVolumeSource": "1 secretName s, 2 shareName s, 3 readOnly b",
    "core.v1.CSIVolumeSource": (
        "1 driver s, 2 readOnly b, 3 fsType s, 4 volumeAttributes {s}, "
        "5 nodePublishSecretRef core.v1.LocalObjectReference"
    ),
    "core.v1.Capabilities": "1 add *s, 2 drop *s",
    "core.v1.CephFSVolumeSource": (
        "1 monitors *s, 2 path s, 3 user s, 4 secretFile s, "
        "5 secretRef core.v1.LocalObjectReference, 6 readOnly b"
    ),
    "core.v1.CinderVolumeSource": (
        "1 volumeID s, 2 fsType s, 3 readOnly b, 4 secretRef core.v1.LocalObjectReference"
    ),
    "core.v1.ClientIPConfig": "1 timeoutSeconds i",
    "core.v1.ClusterTrustBundleProjection": (
        "1 name s, 2 signerName s, 3 labelSelector meta.v1.LabelSelector, 4 path s, 5 optional b"
    ),
    "core.v1.ConfigMap": (
        "1 metadata meta.v1.ObjectMeta, 2 data {s}, 3 binaryData {y}, 4 immutable b"
    ),
    "core.v1.ConfigMapEnvSource": (
        "1 localObjectReference core.v1.LocalObjectReference, 2 optional b"
    ),
    "core.v1.ConfigMapKeySelector": (
        "1 localObjectReference core.v1.LocalObjectReference, 2 key s, 3 optional b"
    ),
    "core.v1.ConfigMapNodeConfigSource": (
        "1 namespace s, 2 name s, 3 uid s, 4 resourceVersion s, 5 kubeletConfigKey s"
    ),
    "core.v1.ConfigMapProjection": (
        "1 localObjectReference core.v1.LocalObjectReference, 2 items *core.v1.KeyToPath, "
        "4 optional b"
    ),
    "core.v1.ConfigMapVolumeSource": (
        "1 localObjectReference core.v1.LocalObjectReference, 2 items *core.v1.KeyToPath, "
        "3 defaultMode i, 4 optional b"
    ),
    "core.v1.Container": (
        "1 name s, 2 image s, 3 command *s, 4 args *s, 5 workingDir s, "
        "6 ports *core.v1.ContainerPort, 7 env *core.v1.EnvVar, "
        "8 resources core.v1.ResourceRequirements, 9 volumeMounts *core.v1.VolumeMount, "
        "10 livenessProbe core.v1.Probe, 11 readinessProbe core.v1.Probe, "
        "12 lifecycle core.v1.Lifecycle, 13 terminationMessagePath s, 14 imagePullPolicy s, "
        "15 securityContext core.v1.SecurityContext, 16 stdin b, 17 stdinOnce b, 18 tty b, "
        "19 envFrom *core.v1.EnvFromSource, 20 terminationMessagePolicy s, "
        "21 volumeDevices *core.v1.VolumeDevice, 22 startupProbe core.v1.Probe, "
        "23 resizePolicy *core.v1.ContainerResizePolicy, 24 restartPolicy s"
    ),
    "core.v1.ContainerImage": "1 names *s, 2 sizeBytes i",
    "core.v1.ContainerPort": "1 name s, 2 hostPort i, 3 containerPort i, 4 protocol s, 5 hostIP s",
    "core.v1.ContainerResizePolicy": "1 resourceName s, 2 restartPolicy s",
    "core.v1.ContainerState": (
        "1 waiting core.v1.ContainerStateWaiting, 2 running core.v1.ContainerStateRunning, "
        "3 terminated core.v1.ContainerStateTerminated"
    ),
    "core.v1.ContainerStateRunning": "1 startedAt T",
    "core.v1.ContainerStateTerminated": (
        "1 exitCode i, 2 signal i, 3 reason s, 4 message s, 5 startedAt T, 6 finishedAt T, "
        "7 containerID s"
    ),
    "core.v1.ContainerStateWaiting": "1 reason s, 2 message s",
    "core.v1.ContainerStatus": (
        "1 name s, 2 state core.v1.ContainerState, 3 lastState core.v1.ContainerState, 4 ready b, "
        "5 restartCount i, 6 image s, 7 imageID s, 8 containerID s, 9 started b, "
        "10 allocatedResources {Q}, 11 resources core.v1.ResourceRequirements, "
        "12 volumeMounts *core.v1.VolumeMountStatus, 13 user core.v1.ContainerUser, "
        "14 allocatedResourcesStatus *core.v1.ResourceStatus"
    ),
    "core.v1.ContainerUser": "1 linux core.v1.LinuxContainerUser",
    "core.v1.DaemonEndpoint": "1 Port i",
    "core.v1.DownwardAPIProjection": "1 items *core.v1.DownwardAPIVolumeFile",
    "core.v1.DownwardAPIVolumeFile": (
        "1 path s, 2 fieldRef core.v1.ObjectFieldSelector, "
        "3 resourceFieldRef core.v1.ResourceFieldSelector, 4 mode i"
    ),
    "core.v1.DownwardAPIVolumeSource": "1 items *core.v1.DownwardAPIVolumeFile, 2 defaultMode i",
    "core.v1.EmptyDirVolumeSource": "1 medium s, 2 sizeLimit Q",
    "core.v1.EnvFromSource": (
        "1 prefix s, 2 configMapRef core.v1.ConfigMapEnvSource, "
        "3 secretRef core.v1.SecretEnvSource"
    ),
    "core.v1.EnvVar": "1 name s, 2 value s, 3 valueFrom core.v1.EnvVarSource",
    "core.v1.EnvVarSource": (
        "1 fieldRef core.v1.ObjectFieldSelector, "
        "2 resourceFieldRef core.v1.ResourceFieldSelector, "
        "3 configMapKeyRef core.v1.ConfigMapKeySelector, 4 secretKeyRef core.v1.SecretKeySelector"
    ),
    "core.v1.EphemeralContainer": (
        "1 ephemeralContainerCommon core.v1.EphemeralContainerCommon, 2 targetContainerName s"
    ),
    "core.v1.EphemeralContainerCommon": (
        "1 name s, 2 image s, 3 command *s, 4 args *s, 5 workingDir s, "
        "6 ports *core.v1.ContainerPort, 7 env *core.v1.EnvVar, "
        "8 resources core.v1.ResourceRequirements, 9 volumeMounts *core.v1.VolumeMount, "
        "10 livenessProbe core.v1.Probe, 11 readinessProbe core.v1.Probe, "
        "12 lifecycle core.v1.Lifecycle, 13 terminationMessagePath s, 14 imagePullPolicy s, "
        "15 securityContext core.v1.SecurityContext, 16 stdin b, 17 stdinOnce b, 18 tty b, "
        "19 envFrom *core.v1.EnvFromSource, 20 terminationMessagePolicy s, "
        "21 volumeDevices *core.v1.VolumeDevice, 22 startupProbe core.v1.Probe, "
        "23 resizePolicy *core.v1.ContainerResizePolicy, 24 restartPolicy s"
    ),
    "core.v1.EphemeralVolumeSource": "1 volumeClaimTemplate core.v1.PersistentVolumeClaimTemplate",
    "core.v1.Event": (
        "1 metadata meta.v1.ObjectMeta, 2 involvedObject core.v1.ObjectReference, 3 reason s, "
        "4 message s, 5 source core.v1.EventSource, 6 firstTimestamp T, 7 lastTimestamp T, "
        "8 count i, 9 type s, 10 eventTime U, 11 series core.v1.EventSeries, 12 action s, "
        "13 related core.v1.ObjectReference, 14 reportingComponent s, 15 reportingInstance s"
    ),
    "core.v1.EventSeries": "1 count i, 2 lastObservedTime U",
    "core.v1.EventSource": "1 component s, 2 host s",
    "core.v1.ExecAction": "1 command *s",
    "core.v1.FCVolumeSource": "1 targetWWNs *s, 2 lun i, 3 fsType s, 4 readOnly b, 5 wwids *s",
    "core.v1.FlexVolumeSource": (
        "1 driver s, 2 fsType s, 3 secretRef core.v1.LocalObjectReference, 4 readOnly b, "
        "5 options {s}"
    ),
    "core.v1.FlockerVolumeSource": "1 datasetName s, 2 datasetUUID s",
    "core.v1.GCEPersistentDiskVolumeSource": "1 pdName s, 2 fsType s, 3 partition i, 4 readOnly b",
    "core.v1.GRPCAction": "1 port i, 2 service s",
    "core.v1.GitRepoVolumeSource": "1 repository s, 2 revision s, 3 directory s",
    "core.v1.GlusterfsVolumeSource": "1 endpoints s, 2 path s, 3 readOnly b",
    "core.v1.HTTPGetAction": (
        "1 path s, 2 port I, 3 host s, 4 scheme s, 5 httpHeaders *core.v1.HTTPHeader"
    ),
    "core.v1.HTTPHeader": "1 name s, 2 value s",
    "core.v1.HostAlias": "1 ip s, 2 hostnames *s",
    "core.v1.HostIP": "1 ip s",
    "core.v1.HostPathVolumeSource": "1 path s, 2 type s",
    "core.v1.ISCSIVolumeSource": (
        "1 targetPortal s, 2 iqn s, 3 lun i, 4 iscsiInterface s, 5 fsType s, 6 readOnly b, "
        "7 portals *s, 8 chapAuthDiscovery b, 10 secretRef core.v1.LocalObjectReference, "
        "11 chapAuthSession b, 12 initiatorName s"
    ),
    "core.v1.ImageVolumeSource": "1 reference s, 2 pullPolicy s",
    "core.v1.KeyToPath": "1 key s, 2 path s, 3 mode i",
    "core.v1.Lifecycle": "1 postStart core.v1.LifecycleHandler, 2 preStop core.v1.LifecycleHandler",
    "core.v1.LifecycleHandler": (
        "1 exec core.v1.ExecAction, 2 httpGet core.v1.HTTPGetAction, "
        "3 tcpSocket core.v1.TCPSocketAction, 4 sleep core.v1.SleepAction"
    ),
    "core.v1.LinuxContainerUser": "1 uid i, 2 gid i, 3 supplementalGroups *i",
    "core.v1.LoadBalancerIngress": "1 ip s, 2 hostname s, 3 ipMode s, 4 ports *core.v1.PortStatus",
    "core.v1.LoadBalancerStatus": "1 ingress *core.v1.LoadBalancerIngress",
    "core.v1.LocalObjectReference": "1 name s",
    "core.v1.NFSVolumeSource": "1 server s, 2 path s, 3 readOnly b",
    "core.v1.Namespace": (
        "1 metadata meta.v1.ObjectMeta, 2 spec core.v1.NamespaceSpec, "
        "3 status core.v1.NamespaceStatus"
    ),
    "core.v1.NamespaceCondition": (
        "1 type s, 2 status s, 4 lastTransitionTime T, 5 reason s, 6 message s"
    ),
    "core.v1.NamespaceSpec": "1 finalizers *s",
    "core.v1.NamespaceStatus": "1 phase s, 2 conditions *core.v1.NamespaceCondition",
    "core.v1.Node": (
        "1 metadata meta.v1.ObjectMeta, 2 spec core.v1.NodeSpec, 3 status core.v1.NodeStatus"
    ),
    "core.v1.NodeAddress": "1 type s, 2 address s",
    "core.v1.NodeAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution core.v1.NodeSelector, "
        "2 preferredDuringSchedulingIgnoredDuringExecution *core.v1.PreferredSchedulingTerm"
    ),
    "core.v1.NodeCondition": (
        "1 type s, 2 status s, 3 lastHeartbeatTime T, 4 lastTransitionTime T, 5 reason s, "
        "6 message s"
    ),
    "core.v1.NodeConfigSource": "2 configMap core.v1.ConfigMapNodeConfigSource",
    "core.v1.NodeConfigStatus": (
        "1 assigned core.v1.NodeConfigSource, 2 active core.v1.NodeConfigSource, "
        "3 lastKnownGood core.v1.NodeConfigSource, 4 error s"
    ),
    "core.v1.NodeDaemonEndpoints": "1 kubeletEndpoint core.v1.DaemonEndpoint",
    "core.v1.NodeFeatures": "1 supplementalGroupsPolicy b",
    "core.v1.NodeRuntimeHandler": "1 name s, 2 features core.v1.NodeRuntimeHandlerFeatures",
    "core.v1.NodeRuntimeHandlerFeatures": "1 recursiveReadOnlyMounts b, 2 userNamespaces b",
    "core.v1.NodeSelector": "1 nodeSelectorTerms *core.v1.NodeSelectorTerm",
    "core.v1.NodeSelectorRequirement": "1 key s, 2 operator s, 3 values *s",
    "core.v1.NodeSelectorTerm": (
        "1 matchExpressions *core.v1.NodeSelectorRequirement, "
        "2 matchFields *core.v1.NodeSelectorRequirement"
    ),
    "core.v1.NodeSpec": (
        "1 podCIDR s, 2 externalID s, 3 providerID s, 4 unschedulable b, 5 taints *core.v1.Taint, "
        "6 configSource core.v1.NodeConfigSource, 7 podCIDRs *s"
    ),
    "core.v1.NodeStatus": (
        "1 capacity {Q}, 2 allocatable {Q}, 3 phase s, 4 conditions *core.v1.NodeCondition, "
        "5 addresses *core.v1.NodeAddress, 6 daemonEndpoints core.v1.NodeDaemonEndpoints, "
        "7 nodeInfo core.v1.NodeSystemInfo, 8 images *core.v1.ContainerImage, 9 volumesInUse *s, "
        "10 volumesAttached *core.v1.AttachedVolume, 11 config core.v1.NodeConfigStatus, "
        "12 runtimeHandlers *core.v1.NodeRuntimeHandler, 13 features core.v1.NodeFeatures"
    ),
    "core.v1.NodeSystemInfo": (
        "1 machineID s, 2 systemUUID s, 3 bootID s, 4 kernelVersion s, 5 osImage s, "
        "6 containerRuntimeVersion s, 7 kubeletVersion s, 8 kubeProxyVersion s, "
        "9 operatingSystem s, 10 architecture s"
    ),
    "core.v1.ObjectFieldSelector": "1 apiVersion s, 2 fieldPath s",
    "core.v1.ObjectReference": (
        "1 kind s, 2 namespace s, 3 name s, 4 uid s, 5 apiVersion s, 6 resourceVersion s, "
        "7 fieldPath s"
    ),
    "core.v1.PersistentVolumeClaimSpec": (
        "1 accessModes *s, 2 resources core.v1.VolumeResourceRequirements, 3 volumeName s, "
        "4 selector meta.v1.LabelSelector, 5 storageClassName s, 6 volumeMode s, "
        "7 dataSource core.v1.TypedLocalObjectReference, "
        "8 dataSourceRef core.v1.TypedObjectReference, 9 volumeAttributesClassName s"
    ),
    "core.v1.PersistentVolumeClaimTemplate": (
        "1 metadata meta.v1.ObjectMeta, 2 spec core.v1.PersistentVolumeClaimSpec"
    ),
    "core.v1.PersistentVolumeClaimVolumeSource": "1 claimName s, 2 readOnly b",
    "core.v1.PhotonPersistentDiskVolumeSource": "1 pdID s, 2 fsType s",
    "core.v1.Pod": (
        "1 metadata meta.v1.ObjectMeta, 2 spec core.v1.PodSpec, 3 status core.v1.PodStatus"
    ),
    "core.v1.PodAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution *core.v1.PodAffinityTerm, "
        "2 preferredDuringSchedulingIgnoredDuringExecution *core.v1.WeightedPodAffinityTerm"
    ),
    "core.v1.PodAffinityTerm": (
        "1 labelSelector meta.v1.LabelSelector, 2 namespaces *s, 3 topologyKey s, "
        "4 namespaceSelector meta.v1.LabelSelector, 5 matchLabelKeys *s, 6 mismatchLabelKeys *s"
    ),
    "core.v1.PodAntiAffinity": (
        "1 requiredDuringSchedulingIgnoredDuringExecution *core.v1.PodAffinityTerm, "
        "2 preferredDuringSchedulingIgnoredDuringExecution *core.v1.WeightedPodAffinityTerm"
    ),
    "core.v1.PodCondition": (
        "1 type s, 2 status s, 3 lastProbeTime T, 4 lastTransitionTime T, 5 reason s, 6 message s"
    ),
    "core.v1.PodDNSConfig": (
        "1 nameservers *s, 2 searches *s, 3 options *core.v1.PodDNSConfigOption"
    ),
    "core.v1.PodDNSConfigOption": "1 name s, 2 value s",
    "core.v1.PodIP": "1 ip s",
    "core.v1.PodOS": "1 name s",
    "core.v1.PodReadinessGate": "1 conditionType s",
    "core.v1.PodResourceClaim": "1 name s, 3 resourceClaimName s, 4 resourceClaimTemplateName s",
    "core.v1.PodResourceClaimStatus": "1 name s, 2 resourceClaimName s",
    "core.v1.PodSchedulingGate": "1 name s",
    "core.v1.PodSecurityContext": (
        "1 seLinuxOptions core.v1.SELinuxOptions, 2 runAsUser i, 3 runAsNonRoot b, "
        "4 supplementalGroups *i, 5 fsGroup i, 6 runAsGroup i, 7 sysctls *core.v1.Sysctl, "
        "8 windowsOptions core.v1.WindowsSecurityContextOptions, 9 fsGroupChangePolicy s, "
        "10 seccompProfile core.v1.SeccompProfile, 11 appArmorProfile core.v1.AppArmorProfile, "
        "12 supplementalGroupsPolicy s, 13 seLinuxChangePolicy s"
    ),
    "core.v1.PodSpec": (
        "1 volumes *core.v1.Volume, 2 containers *core.v1.Container, 3 restartPolicy s, "
        "4 terminationGracePeriodSeconds i, 5 activeDeadlineSeconds i, 6 dnsPolicy s, "
        "7 nodeSelector {s}, 8 serviceAccountName s, 9 serviceAccount s, 10 nodeName s, "
        "11 hostNetwork b, 12 hostPID b, 13 hostIPC b, "
        "14 securityContext core.v1.PodSecurityContext, "
        "15 imagePullSecrets *core.v1.LocalObjectReference, 16 hostname s, 17 subdomain s, "
        "18 affinity core.v1.Affinity, 19 schedulerName s, 20 initContainers *core.v1.Container, "
        "21 automountServiceAccountToken b, 22 tolerations *core.v1.Toleration, "
        "23 hostAliases *core.v1.HostAlias, 24 priorityClassName s, 25 priority i, "
        "26 dnsConfig core.v1.PodDNSConfig, 27 shareProcessNamespace b, "
        "28 readinessGates *core.v1.PodReadinessGate, 29 runtimeClassName s, "
        "30 enableServiceLinks b, 31 preemptionPolicy s, 32 overhead {Q}, "
        "33 topologySpreadConstraints *core.v1.TopologySpreadConstraint, "
        "34 ephemeralContainers *core.v1.EphemeralContainer, 35 setHostnameAsFQDN b, "
        "36 os core.v1.PodOS, 37 hostUsers b, 38 schedulingGates *core.v1.PodSchedulingGate, "
        "39 resourceClaims *core.v1.PodResourceClaim, 40 resources core.v1.ResourceRequirements"
    ),
    "core.v1.PodStatus": (
        "1 phase s, 2 conditions *core.v1.PodCondition, 3 message s, 4 reason s, 5 hostIP s, "
        "6 podIP s, 7 startTime T, 8 containerStatuses *core.v1.ContainerStatus, 9 qosClass s, "
        "10 initContainerStatuses *core.v1.ContainerStatus, 11 nominatedNodeName s, "
        "12 podIPs *core.v1.PodIP, 13 ephemeralContainerStatuses *core.v1.ContainerStatus, "
        "14 resize s, 15 resourceClaimStatuses *core.v1.PodResourceClaimStatus, "
        "16 hostIPs *core.v1.HostIP"
    ),
    "core.v1.PodTemplateSpec": "1 metadata meta.v1.ObjectMeta, 2 spec core.v1.PodSpec",
    "core.v1.PortStatus": "1 port i, 2 protocol s, 3 error s",
    "core.v1.PortworxVolumeSource": "1 volumeID s, 2 fsType s, 3 readOnly b",
    "core.v1.PreferredSchedulingTerm": "1 weight i, 2 preference core.v1.NodeSelectorTerm",
    "core.v1.Probe": (
        "1 handler core.v1.ProbeHandler, 2 initialDelaySeconds i, 3 timeoutSeconds i, "
        "4 periodSeconds i, 5 successThreshold i, 6 failureThreshold i, "
        "7 terminationGracePeriodSeconds i"
    ),
    "core.v1.ProbeHandler": (
        "1 exec core.v1.ExecAction, 2 httpGet core.v1.HTTPGetAction, "
        "3 tcpSocket core.v1.TCPSocketAction, 4 grpc core.v1.GRPCAction"
    ),
    "core.v1.ProjectedVolumeSource": "1 sources *core.v1.VolumeProjection, 2 defaultMode i",
    "core.v1.QuobyteVolumeSource": (
        "1 registry s, 2 volume s, 3 readOnly b, 4 user s, 5 group s, 6 tenant s"
    ),
    "core.v1.RBDVolumeSource": (
        "1 monitors *s, 2 image s, 3 fsType s, 4 pool s, 5 user s, 6 keyring s, "
        "7 secretRef core.v1.LocalObjectReference, 8 readOnly b"
    ),
    "core.v1.ResourceClaim": "1 name s, 2 request s",
    "core.v1.ResourceFieldSelector": "1 containerName s, 2 resource s, 3 divisor Q",
    "core.v1.ResourceHealth": "1 resourceID s, 2 health s",
    "core.v1.ResourceRequirements": "1 limits {Q}, 2 requests {Q}, 3 claims *core.v1.ResourceClaim",
    "core.v1.ResourceStatus": "1 name s, 2 resources *core.v1.ResourceHealth",
    "core.v1.SELinuxOptions": "1 user s, 2 role s, 3 type s, 4 level s",
    "core.v1.ScaleIOVolumeSource": (
        "1 gateway s, 2 system s, 3 secretRef core.v1.LocalObjectReference, 4 sslEnabled b, "
        "5 protectionDomain s, 6 storagePool s, 7 storageMode s, 8 volumeName s, 9 fsType s, "
        "10 readOnly b"
    ),
    "core.v1.SeccompProfile": "1 type s, 2 localhostProfile s",
    "core.v1.Secret": (
        "1 metadata meta.v1.ObjectMeta, 2 data {y}, 3 type s, 4 stringData {s}, 5 immutable b"
    ),
    "core.v1.SecretEnvSource": "1 localObjectReference core.v1.LocalObjectReference, 2 optional b",
    "core.v1.SecretKeySelector": (
        "1 localObjectReference core.v1.LocalObjectReference, 2 key s, 3 optional b"
    ),
    "core.v1.SecretProjection": (
        "1 localObjectReference core.v1.LocalObjectReference, 2 items *core.v1.KeyToPath, "
        "4 optional b"
    ),
    "core.v1.SecretVolumeSource": (
        "1 secretName s, 2 items *core.v1.KeyToPath, 3 defaultMode i, 4 optional b"
    ),
    "core.v1.SecurityContext": (
        "1 capabilities core.v1.Capabilities, 2 privileged b, "
        "3 seLinuxOptions core.v1.SELinuxOptions, 4 runAsUser i, 5 runAsNonRoot b, "
        "6 readOnlyRootFilesystem b, 7 allowPrivilegeEscalation b, 8 runAsGroup i, 9 procMount s, "
        "10 windowsOptions core.v1.WindowsSecurityContextOptions, "
        "11 seccompProfile core.v1.SeccompProfile, 12 appArmorProfile core.v1.AppArmorProfile"
    ),
    "core.v1.Service": (
        "1 metadata meta.v1.ObjectMeta, 2 spec core.v1.ServiceSpec, 3 status core.v1.ServiceStatus"
    ),
    "core.v1.ServiceAccount": (
        "1 metadata meta.v1.ObjectMeta, 2 secrets *core.v1.ObjectReference, "
        "3 imagePullSecrets *core.v1.LocalObjectReference, 4 automountServiceAccountToken b"
    ),
    "core.v1.ServiceAccountTokenProjection": "1 audience s, 2 expirationSeconds i, 3 path s",
    "core.v1.ServicePort": (
        "1 name s, 2 protocol s, 3 port i, 4 targetPort I, 5 nodePort i, 6 appProtocol s"
    ),
    "core.v1.ServiceSpec": (
        "1 ports *core.v1.ServicePort, 2 selector {s}, 3 clusterIP s, 4 type s, 5 externalIPs *s, "
        "7 sessionAffinity s, 8 loadBalancerIP s, 9 loadBalancerSourceRanges *s, "
        "10 externalName s, 11 externalTrafficPolicy s, 12 healthCheckNodePort i, "
        "13 publishNotReadyAddresses b, 14 sessionAffinityConfig core.v1.SessionAffinityConfig, "
        "17 ipFamilyPolicy s, 18 clusterIPs *s, 19 ipFamilies *s, "
        "20 allocateLoadBalancerNodePorts b, 21 loadBalancerClass s, 22 internalTrafficPolicy s, "
        "23 trafficDistribution s"
    ),
    "core.v1.ServiceStatus": (
        "1 loadBalancer core.v1.LoadBalancerStatus, 2 conditions *meta.v1.Condition"
    ),
    "core.v1.SessionAffinityConfig": "1 clientIP core.v1.ClientIPConfig",
    "core.v1.SleepAction": "1 seconds i",
    "core.v1.StorageOSVolumeSource": (
        "1 volumeName s, 2 volumeNamespace s, 3 fsType s, 4 readOnly b, "
        "5 secretRef core.v1.LocalObjectReference"
    ),
    "core.v1.Sysctl": "1 name s, 2 value s",
    "core.v1.TCPSocketAction": "1 port I, 2 host s",
    "core.v1.Taint": "1 key s, 2 value s, 3 effect s, 4 timeAdded T",
    "core.v1.Toleration": "1 key s, 2 operator s, 3 value s, 4 effect s, 5 tolerationSeconds i",
    "core.v1.TopologySpreadConstraint": (
        "1 maxSkew i, 2 topologyKey s, 3 whenUnsatisfiable s, "
        "4 labelSelector meta.v1.LabelSelector, 5 minDomains i, 6 nodeAffinityPolicy s, "
        "7 nodeTaintsPolicy s, 8 matchLabelKeys *s"
    ),
    "core.v1.TypedLocalObjectReference": "1 apiGroup s, 2 kind s, 3 name s",
    "core.v1.TypedObjectReference": "1 apiGroup s, 2 kind s, 3 name s, 4 namespace s",
    "core.v1.Volume": "1 name s, 2 volumeSource core.v1.VolumeSource",
    "core.v1.VolumeDevice": "1 name s, 2 devicePath s",
    "core.v1.VolumeMount": (
        "1 name s, 2 readOnly b, 3 mountPath s, 4 subPath s, 5 mountPropagation s, "
        "6 subPathExpr s, 7 recursiveReadOnly s"
    ),
    "core.v1.VolumeMountStatus": "1 name s, 2 mountPath s, 3 readOnly b, 4 recursiveReadOnly s",
    "core.v1.VolumeProjection": (
        "1 secret core.v1.SecretProjection, 2 downwardAPI core.v1.DownwardAPIProjection, "
        "3 configMap core.v1.ConfigMapProjection, "
        "4 serviceAccountToken core.v1.ServiceAccountTokenProjection, "
        "5 clusterTrustBundle core.v1.ClusterTrustBundleProjection"
    ),
    "core.v1.VolumeResourceRequirements": "1 limits {Q}, 2 requests {Q}",
    "core.v1.VolumeSource": (
        "1 hostPath core.v1.HostPathVolumeSource, 2 emptyDir core.v1.EmptyDirVolumeSource, "
        "3 gcePersistentDisk core.v1.GCEPersistentDiskVolumeSource, "
        "4 awsElasticBlockStore core.v1.AWSElasticBlockStoreVolumeSource, "
        "5 gitRepo core.v1.GitRepoVolumeSource, 6 secret core.v1.SecretVolumeSource, "
        "7 nfs core.v1.NFSVolumeSource, 8 iscsi core.v1.ISCSIVolumeSource, "
        "9 glusterfs core.v1.GlusterfsVolumeSource, "
        "10 persistentVolumeClaim core.v1.PersistentVolumeClaimVolumeSource, "
        "11 rbd core.v1.RBDVolumeSource, 12 flexVolume core.v1.FlexVolumeSource, "
        "13 cinder core.v1.CinderVolumeSource, 14 cephfs core.v1.CephFSVolumeSource, "
        "15 flocker core.v1.FlockerVolumeSource, 16 downwardAPI core.v1.DownwardAPIVolumeSource, "
        "17 fc core.v1.FCVolumeSource, 18 azureFile core.v1.AzureFileVolumeSource, "
        "19 configMap core.v1.ConfigMapVolumeSource, "
        "20 vsphereVolume core.v1.VsphereVirtualDiskVolumeSource, "
        "21 quobyte core.v1.QuobyteVolumeSource, 22 azureDisk core.v1.AzureDiskVolumeSource, "
        "23 photonPersistentDisk core.v1.PhotonPersistentDiskVolumeSource, "
        "24 portworxVolume core.v1.PortworxVolumeSource, 25 scaleIO core.v1.ScaleIOVolumeSource, "
        "26 projected core.v1.ProjectedVolumeSource, 27 storageos core.v1.StorageOSVolumeSource, "
        "28 csi core.v1.CSIVolumeSource, 29 ephemeral core.v1.EphemeralVolumeSource, "
        "30 image core.v1.ImageVolumeSource"
    ),
    "core.v1.VsphereVirtualDiskVolumeSource": (
        "1 volumePath s, 2 fsType s, 3 storagePolicyName s, 4 storagePolicyID s"
    ),
    "core.v1.WeightedPodAffinityTerm": "1 weight i, 2 podAffinityTerm core.v1.PodAffinityTerm",
    "core.v1.WindowsSecurityContextOptions": (
        "1 gmsaCredentialSpecName s, 2 gmsaCredentialSpec s, 3 runAsUserName s, 4 hostProcess b"
    ),
    "meta.v1.Condition": (
        "1 type s, 2 status s, 3 observedGeneration i, 4 lastTransitionTime T, 5 reason s, "
        "6 message s"
    ),
    "meta.v1.DeleteOptions": (
        "1 gracePeriodSeconds i, 2 preconditions meta.v1.Preconditions, 3 orphanDependents b, "
        "4 propagationPolicy s, 5 dryRun *s, 6 ignoreStoreReadErrorWithClusterBreakingPotential b"
    ),
    "meta.v1.LabelSelector": (
        "1 matchLabels {s}, 2 matchExpressions *meta.v1.LabelSelectorRequirement"
    ),
    "meta.v1.LabelSelectorRequirement": "1 key s, 2 operator s, 3 values *s",
    "meta.v1.ManagedFieldsEntry": (
        "1 manager s, 2 operation s, 3 apiVersion s, 4 time T, 6 fieldsType s, 7 fieldsV1 F, "
        "8 subresource s"
    ),
    "meta.v1.ObjectMeta": (
        "1 name s, 2 generateName s, 3 namespace s, 4 selfLink s, 5 uid s, 6 resourceVersion s, "
        "7 generation i, 8 creationTimestamp T, 9 deletionTimestamp T, "
        "10 deletionGracePeriodSeconds i, 11 labels {s}, 12 annotations {s}, "
        "13 ownerReferences *meta.v1.OwnerReference, 14 finalizers *s, "
        "17 managedFields *meta.v1.ManagedFieldsEntry"
    ),
    "meta.v1.OwnerReference": (
        "1 kind s, 3 name s, 4 uid s, 5 apiVersion s, 6 controller b, 7 blockOwnerDeletion b"
    ),
    "meta.v1.Preconditions": "1 uid s, 2 resourceVersion s",
    "networking.v1.IPBlock": "1 cidr s, 2 except *s",
    "networking.v1.NetworkPolicy": (
        "1 metadata meta.v1.ObjectMeta, 2 spec networking.v1.NetworkPolicySpec"
    ),
    "networking.v1.NetworkPolicyEgressRule": (
        "1 ports *networking.v1.NetworkPolicyPort, 2 to *networking.v1.NetworkPolicyPeer"
    ),
    "networking.v1.NetworkPolicyIngressRule": (
        "1 ports *networking.v1.NetworkPolicyPort, 2 from *networking.v1.NetworkPolicyPeer"
    ),
    "networking.v1.NetworkPolicyPeer": (
        "1 podSelector meta.v1.LabelSelector, 2 namespaceSelector meta.v1.LabelSelector, "
        "3 ipBlock networking.v1.IPBlock"
    ),
    "networking.v1.NetworkPolicyPort": "1 protocol s, 2 port I, 3 endPort i",
    "networking.v1.NetworkPolicySpec": (
        "1 podSelector meta.v1.LabelSelector, 2 ingress *networking.v1.NetworkPolicyIngressRule, "
        "3 egress *networking.v1.NetworkPolicyEgressRule, 4 policyTypes *s"
    ),
    "rbac.v1.AggregationRule": "1 clusterRoleSelectors *meta.v1.LabelSelector",
    "rbac.v1.ClusterRole": (
        "1 metadata meta.v1.ObjectMeta, 2 rules *rbac.v1.PolicyRule, "
        "3 aggregationRule rbac.v1.AggregationRule"
    ),
    "rbac.v1.ClusterRoleBinding": (
        "1 metadata meta.v1.ObjectMeta, 2 subjects *rbac.v1.Subject, 3 roleRef rbac.v1.RoleRef"
    ),
    "rbac.v1.PolicyRule": (
        "1 verbs *s, 2 apiGroups *s, 3 resources *s, 4 resourceNames *s, 5 nonResourceURLs *s"
    ),
    "rbac.v1.Role": "1 metadata meta.v1.ObjectMeta, 2 rules *rbac.v1.PolicyRule",
    "rbac.v1.RoleBinding": (
        "1 metadata meta.v1.ObjectMeta, 2 subjects *rbac.v1.Subject, 3 roleRef rbac.v1.RoleRef"
    ),
    "rbac.v1.RoleRef": "1 apiGroup s, 2 kind s, 3 name s",
    "rbac.v1.Subject": "1 kind s, 2 apiGroup s, 3 name s, 4 namespace s",
}
