"""``mooncake.structured_object_store``: objects made of many named members (arrays, tensors,
bytes), DataProto batches and flat dicts, stored in Mooncake Store as one bundle of keys each.

``MooncakeBundleTransfer(store, key_prefix="bundle", default_chunk_bytes=64 MiB, buffer_pool=None)``
works with a ``MooncakeDistributedStore`` (or any object with its ``put`` / ``get`` / ``remove``
and, for the fast paths, ``batch_put_from`` / ``batch_get_into`` / ``get_into`` /
``get_into_ranges`` / ``register_buffer`` / ``put_tensor`` / ``get_tensor``):

- ``put_bundle(meta, buffers)`` / ``remove_bundle(ref)``: raw bytes plus named byte buffers.
- ``put_structured_object(StructuredObjectPayload(metadata, buffers))`` -> ``RemoteBundleRef``;
  ``read_spec(ref)`` (narrowed with ``select_members`` / ``slice_member``), then ``materialize``
  or ``materialize_into`` (caller destinations: ndarrays, ``raw_destination``,
  ``tensor_object_buffer``). ``put_object`` / ``get_object`` are the short form for a dict of
  members or a single array / tensor.
- ``put`` / ``get`` (``type="dataproto"`` or ``"dict"``), ``put_dataproto``,
  ``append_dataproto_fields``, ``get_dataproto`` (fields, rows, destinations),
  ``dataproto_manifest_view``, ``cleanup_dataproto``: DataProto batches, one structured object
  per stage; ``export_ref`` / ``import_ref`` turn a ref into a JSON-safe handle and back.
- ``release_result(result)`` gives back the ``BufferPool`` leases that pool-backed results hold.

With a ``buffer_pool`` (made automatically over a ``MooncakeDistributedStore``), writes copy
each chunk into a pool lease and ``batch_put_from`` it, and whole-member reads land in pool
memory. Chunks are ``chunk_bytes`` (per call) or ``default_chunk_bytes``. ``config`` (a
``ReplicateConfig``) is passed to every write; its one ``group_ids`` entry is repeated for every
key (see ``_structured_config``). The pieces live in ``_structured_*`` modules; this module
re-exports the names upstream's module has."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from ._structured_bundle import (_BundleManifestStore, _bytes_view, _decode_manifest, _DirectCopyPayload,  # noqa: F401
                                 _encode_manifest, _MultiBufferPayload, _normalize_key_prefix, _RawDestinationBuffer,
                                 _split_multi_buffer_payload, _split_view, _TensorObjectBufferPayload,
                                 _TensorPayload, _validate_chunk_bytes, _validate_key_segment, concat_arrays_into,
                                 raw_destination, tensor_object_buffer)
from ._structured_codecs import (_decode_bytes_like_values, _decode_msgpack_ragged_values,  # noqa: F401
                                 _decode_numeric_scalar_values, _decode_ragged_tensor_values,
                                 _decode_structured_leaf, _decode_typed_ragged_values, _encode_bytes_like_values,
                                 _encode_msgpack_ragged_values, _encode_numeric_scalar_values,
                                 _encode_ragged_tensor_values, _encode_structured_leaf,
                                 _encode_typed_ragged_regular_ndarray_rows, _encode_typed_ragged_values,
                                 _encode_with_fallback, _encode_with_schema, _EncodedStructuredLeaf,
                                 _normalize_structured_scalar, _object_array_from_decoded_values,
                                 _OwnerBackedList, _OwnerBackedObjectArray)
from ._structured_config import (_cleanup_keys, _config_for_grouped_keys, _config_with_group_id,  # noqa: F401
                                 _copy_write_config)
from ._structured_dataproto import DataProtoMixin
from ._structured_dpsupport import (_DataProtoRowSelection, _envelope_to_flat_dict,  # noqa: F401
                                    _flat_dict_to_envelope)
from ._structured_infer import (MISSING, _choose_leaf_codec, _CodecDecision, _escape_key,  # noqa: F401
                                _InferredLeaf, _InferredNode, _Missing, infer_structure)
from ._structured_layer import (_decode_structured_metadata, _encode_structured_fields,  # noqa: F401
                                _encode_structured_metadata, _NdarrayReadPlan, _StructuredObjectLayer)
from ._structured_recursive import (_decode_structured_non_tensor_encoded,  # noqa: F401
                                    _encode_ragged_tensor_dict_values, _encode_structured_non_tensor_field,
                                    _lookup_structured_path, _structured_path_tokens)
from ._structured_refs import (AUTO_PARALLEL_MIN_BYTES, AUTO_PARALLEL_MIN_CHUNKS,  # noqa: F401
                               DATAPROTO_REF_HANDLE_TYPE, DATAPROTO_REF_HANDLE_VERSION, DEFAULT_BUNDLE_CHUNK_BYTES,
                               MISSING_OBJECT_ERROR, STORAGE_GROUP_ID, STRUCTURED_FIELD_SPECS_KEY,
                               WRAPPED_OBJECT_KEY, BundleTransferPolicy, FieldSchema, MooncakeDataProtoRef,
                               RemoteBundleRef, StructuredFieldLocation, StructuredMemberSlice,
                               StructuredObjectPayload, StructuredObjectReadSpec, StructuredObjectResult,
                               export_dataproto_ref, export_ref, import_dataproto_ref, import_ref,
                               is_dataproto_ref_handle)
from ._structured_tensors import _has_tensor_codec_helpers  # noqa: F401
from ._structured_transport import _MooncakePayloadTransport, _PoolBackedNdarray, _PoolLeaseOwner  # noqa: F401

# The copy used for ``_DirectCopyPayload`` chunks (upstream: a native extension, here numpy
# and ctypes); tests replace it.
_concat_arrays_into = concat_arrays_into

__all__ = [
    "BundleTransferPolicy", "FieldSchema", "MISSING", "MooncakeBundleTransfer", "MooncakeDataProtoRef",
    "RemoteBundleRef", "StructuredFieldLocation", "StructuredMemberSlice", "StructuredObjectPayload",
    "StructuredObjectReadSpec", "StructuredObjectResult", "export_dataproto_ref", "export_ref",
    "import_dataproto_ref", "import_ref", "infer_structure", "is_dataproto_ref_handle", "raw_destination",
    "tensor_object_buffer", "DEFAULT_BUNDLE_CHUNK_BYTES",
]


class MooncakeBundleTransfer(DataProtoMixin):
    """Structured objects and DataProto batches over one store (see the module docstring)."""

    def __init__(self, store: Any, key_prefix: str = "bundle", default_chunk_bytes: int = DEFAULT_BUNDLE_CHUNK_BYTES,
                 buffer_pool: Any = None) -> None:
        self.store = store
        self.key_prefix = _normalize_key_prefix(key_prefix)
        self.default_chunk_bytes = _validate_chunk_bytes(default_chunk_bytes)
        self._transport = _MooncakePayloadTransport(store, buffer_pool=buffer_pool)
        self._bundle_store = _BundleManifestStore(store, self._transport, self.key_prefix, self.default_chunk_bytes)
        self._structured_store = _StructuredObjectLayer(self._bundle_store)

    def _new_storage_group_id(self, config: Any) -> Optional[str]:
        from ._structured_config import new_storage_group_id
        return new_storage_group_id(config)

    def put_bundle(self, meta: Any, buffers: Mapping[str, Any], partition: str = "default",
                   chunk_bytes: Optional[int] = None, policy: Optional[BundleTransferPolicy] = None,
                   max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        """Store ``meta`` bytes plus named byte buffers."""
        return self._bundle_store.put_bundle(meta, buffers, partition, chunk_bytes, policy, max_inflight_put, config)

    def remove_bundle(self, ref: Any) -> None:
        """Remove every key of a bundle (raises when one cannot be removed)."""
        self._bundle_store.remove_bundle(ref)

    def put_structured_object(self, payload: StructuredObjectPayload, partition: str = "default",
                              chunk_bytes: Optional[int] = None, policy: Optional[BundleTransferPolicy] = None,
                              max_inflight_put: Optional[int] = None, config: Any = None) -> RemoteBundleRef:
        return self._structured_store.put_structured_object(payload, partition, chunk_bytes, policy,
                                                            max_inflight_put, config)

    def put_object(self, obj: Any, partition: str = "default", chunk_bytes: Optional[int] = None,
                   policy: Optional[BundleTransferPolicy] = None, max_inflight_put: Optional[int] = None,
                   config: Any = None) -> RemoteBundleRef:
        """A mapping of members, or one value (kept under the member ``value``)."""
        if isinstance(obj, Mapping):
            payload = StructuredObjectPayload(metadata={}, buffers=obj)
        else:
            payload = StructuredObjectPayload(metadata={WRAPPED_OBJECT_KEY: True}, buffers={"value": obj})
        return self.put_structured_object(payload, partition=partition, chunk_bytes=chunk_bytes, policy=policy,
                                          max_inflight_put=max_inflight_put, config=config)

    def get_object(self, ref: Any) -> Any:
        result = self.materialize(self.read_spec(ref))
        return result.objects["value"] if result.metadata.get(WRAPPED_OBJECT_KEY) else result.objects

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        return self._structured_store.read_spec(ref)

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        return self._structured_store.materialize(spec)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        return self._structured_store.materialize_into(spec, destinations)

    @staticmethod
    def release_result(result: Any) -> None:
        """Give back the pool leases held by the pool-backed values in ``result`` (any nesting of
        dicts, lists, tuples and object arrays); each lease once, however often called."""
        done_owners, seen = set(), set()

        def visit(value: Any) -> None:
            owner = getattr(value, "_mooncake_pool_owner", None)
            if owner is not None:
                if id(owner) not in done_owners:
                    done_owners.add(id(owner))
                    owner.release()
                return
            if isinstance(value, Mapping):
                items = value.values()
            elif isinstance(value, (list, tuple)):
                items = value
            elif isinstance(value, np.ndarray) and value.dtype == object:
                items = value.flat
            else:
                return
            if id(value) in seen:
                return
            seen.add(id(value))
            for item in items:
                visit(item)

        visit(result)
