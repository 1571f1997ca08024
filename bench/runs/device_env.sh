# Sourced by a device run script: `. bench/runs/device_env.sh RUN CACHE` sets T (h200 or h100, from the
# GPU's name) and R=$OUT/RUN-$T (created), prints the GPU, unpacks CACHE.txz into CACHE unless it is
# there, and exports the offline environment (the repository on PYTHONPATH, NOVA_OFFLINE=1,
# NOVA_TARGET=$T, NOVA_CACHE_DIR=CACHE).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*) T=h100 ;; *) T=h200 ;;
esac
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
R=$OUT/$1-$T; mkdir -p "$R"
[ -d "$2" ] || tar xf "$2.txz"
export PYTHONPATH=.:${EXTRA_PYTHONPATH:-} NOVA_OFFLINE=1 PYTHONUNBUFFERED=1 NOVA_TARGET=$T \
    NOVA_CACHE_DIR=$PWD/$2
