package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Provisioner is the name the local cluster's default StorageClass gives as
// its provisioner; provision answers for it.
const Provisioner = "gantry.dev/local-provisioner"

// provision simulates a dynamic volume provisioner, which kwok lacks: every
// claim of the default StorageClass gets a PersistentVolume made for it
// (pre-bound to the claim, of the size it asks), and a volume whose claim is
// gone (Released) is removed — so the local cluster never runs out of
// volumes however many workloads come and go. It runs until ctx ends; its
// informers resync every 30 s, which retries anything that failed.
// Each volume is a directory of its own under dir (the cluster's, private).
func provision(ctx context.Context, cs kubernetes.Interface, dir string, log io.Writer) {
	f := informers.NewSharedInformerFactory(cs, 30*time.Second)
	claims := f.Core().V1().PersistentVolumeClaims().Informer()
	volumes := f.Core().V1().PersistentVolumes().Informer()
	onClaim := func(obj any) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok || pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil {
			return
		}
		if sc := pvc.Spec.StorageClassName; sc != nil && *sc != "standard" {
			return
		}
		if err := makeVolume(ctx, cs, dir, pvc); err != nil && ctx.Err() == nil {
			fmt.Fprintf(log, "cluster: provision a volume for %s/%s: %v\n", pvc.Namespace, pvc.Name, err)
		}
	}
	onVolume := func(obj any) {
		pv, ok := obj.(*corev1.PersistentVolume)
		if !ok || pv.Status.Phase != corev1.VolumeReleased || pv.Annotations["pv.kubernetes.io/provisioned-by"] != Provisioner {
			return
		}
		err := cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
			fmt.Fprintf(log, "cluster: remove released volume %s: %v\n", pv.Name, err)
		}
		if err == nil && pv.Spec.HostPath != nil && filepath.Dir(pv.Spec.HostPath.Path) == dir {
			os.RemoveAll(pv.Spec.HostPath.Path) // what the real node wrote there
		}
	}
	claims.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onClaim, UpdateFunc: func(_, n any) { onClaim(n) }})
	volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onVolume, UpdateFunc: func(_, n any) { onVolume(n) }})
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
}

// makeVolume creates the volume a claim asks for, bound to it: a directory
// of its own under dir (a real node's pods write there, as hostPath; the
// simulated nodes' never do) that its pods' user may write (they run as a
// user of their own, and fsGroup does not apply to hostPath volumes; dir
// itself is private to the cluster's owner).
func makeVolume(ctx context.Context, cs kubernetes.Interface, dir string, pvc *corev1.PersistentVolumeClaim) error {
	size, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return fmt.Errorf("the claim asks for no storage size")
	}
	vol := filepath.Join(dir, string(pvc.UID))
	if err := os.Mkdir(vol, 0o777); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chmod(vol, 0o777); err != nil { // past the umask
		return err
	}
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pvc-" + string(pvc.UID), Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              "standard",
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, APIVersion: "v1"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: vol}},
		},
	}
	_, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
